//! A full or read-only `dataDir` under the whole chain: ADD fails with a
//! clear error (code 5 naming the cause) and rolls back, and the store is
//! not damaged: once the disk is healthy again, every earlier pod still
//! passes CHECK, the next ADD gets an address nobody holds, and DEL of
//! everything leaves the store empty.
//!
//! The store is a small tmpfs mounted in a mount namespace of the test's
//! own (held by a `sleep` started with `unshare -m`); plugins run inside
//! it (`nsenter -m`), the test reads the store through `/proc/<pid>/root`,
//! and the machine's mounts never change. The disk is filled to the last
//! page and then given back one page at a time, so the ADDs run out of
//! space at every write host-local makes (index entry, lease, round-robin
//! file, index stamp).

mod resilience_common;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use conformance::testnet::TestNetns;
use libcni::runtime::{RuntimeConf, RuntimeError};
use resilience_common::*;

const PAGE: u64 = 4096;

/// A mount namespace whose `dir` is a tmpfs of `size`; gone on drop.
struct TmpfsStore {
    holder: Child,
    dir: PathBuf,
}

impl TmpfsStore {
    fn start(dir: &Path, size: &str) -> TmpfsStore {
        let mut holder = Command::new("unshare")
            .args(["--mount", "--propagation", "slave", "sh", "-c"])
            .arg(r#"mount -t tmpfs -o "size=$2,mode=0755" tmpfs "$1" && echo ready && exec sleep 3600"#)
            .arg("sh")
            .arg(dir)
            .arg(size)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "tmpfs mount failed");
        TmpfsStore {
            holder,
            dir: dir.to_path_buf(),
        }
    }

    fn pid(&self) -> u32 {
        self.holder.id()
    }

    /// `dir` as this process reaches it.
    fn view(&self) -> PathBuf {
        Path::new(&format!("/proc/{}/root", self.pid())).join(self.dir.strip_prefix("/").unwrap())
    }

    fn remount(&self, mode: &str) {
        let status = Command::new("nsenter")
            .args(["-t", &self.pid().to_string(), "-m", "mount", "-o"])
            .arg(format!("remount,{mode}"))
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(status.success(), "remount {mode}");
    }

    /// Fills the tmpfs, then frees `pages` pages again.
    fn fill_leaving(&self, pages: u64) {
        let path = self.view().join("fill");
        let mut file = fs::File::create(&path).unwrap();
        let chunk = vec![0u8; PAGE as usize];
        let mut written = 0u64;
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
        file.set_len(written.saturating_sub(pages * PAGE)).unwrap();
    }

    fn free_all(&self) {
        fs::remove_file(self.view().join("fill")).unwrap();
    }
}

impl Drop for TmpfsStore {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

fn code_and_text(e: &RuntimeError) -> (u32, String) {
    let code = e
        .code()
        .unwrap_or_else(|| panic!("no plugin error code in: {e}"))
        .as_u32();
    (code, e.to_string())
}

/// The pods that hold addresses, and the checks that they still do.
struct Pods<'a> {
    host: &'a TestHost,
    backend: Backend,
    live: Vec<(TestNetns, RuntimeConf, Vec<String>)>,
}

impl Pods<'_> {
    fn add(&mut self, id: &str) -> Result<(), RuntimeError> {
        let pod = TestNetns::new("rd-p");
        let port = 34000 + self.live.len() as u16;
        let rt = self.host.runtime_conf(id, &pod, port);
        let result = self.host.add(self.backend, &rt)?;
        let ips = result_ips(&result);
        for (_, other, other_ips) in &self.live {
            assert!(
                ips.iter().all(|ip| !other_ips.contains(ip)),
                "{id} got {ips:?}, which {} holds",
                other.container_id
            );
        }
        self.live.push((pod, rt, ips));
        Ok(())
    }

    /// Every live pod passes CHECK and the store holds exactly their
    /// leases.
    fn assert_intact(&self, when: &str) {
        let mut expected = BTreeMap::new();
        for (_, rt, ips) in &self.live {
            self.host
                .cni
                .check_network_list(self.host.list(self.backend), rt)
                .unwrap_or_else(|e| panic!("{when}: CHECK {}: {e}", rt.container_id));
            for ip in ips {
                expected.insert(ip.clone(), format!("{}\r\n{IFNAME}", rt.container_id));
            }
        }
        assert_eq!(self.host.leases(), expected, "{when}");
        let stray = self.host.stray_store_files();
        let entries: Vec<&String> = stray
            .iter()
            .filter(|f| !f.starts_with(".host-local-index/"))
            .collect();
        assert!(entries.is_empty(), "{when}: stray files {stray:?}");
    }
}

#[test]
fn a_full_or_read_only_data_dir_fails_clearly_and_damages_nothing() {
    let data = tempfile::tempdir().unwrap();
    let store = TmpfsStore::start(data.path(), "256k");
    let mut options = HostOptions::new("rd", "10.238.0.0/24");
    options.mount_ns_of = Some(store.pid());
    options.data_dir = Some(data.path().to_path_buf());
    let host = TestHost::with_options(options);
    let backend = Backend::Nftables;
    let mut pods = Pods {
        host: &host,
        backend,
        live: Vec::new(),
    };
    for n in 0..6 {
        pods.add(&format!("disk-early-{n}")).unwrap();
    }
    let baseline = TestHost::chains(&host.firewall());
    pods.assert_intact("before");

    // Full: from no page free to enough for an ADD.
    let mut out_of_space = 0;
    for free_pages in 0..4 {
        store.fill_leaving(free_pages);
        let id = format!("disk-full-{free_pages}");
        let outcome = pods.add(&id);
        store.free_all();
        match outcome {
            Ok(()) => println!("{free_pages} pages free: ADD succeeded"),
            Err(e) => {
                let (code, text) = code_and_text(&e);
                println!("{free_pages} pages free: {text}");
                assert_eq!(code, 5, "{free_pages} pages free: {text}");
                assert!(text.contains("No space left on device"), "{text}");
                out_of_space += 1;
                // What a runtime does after a failed ADD.
                let pod = TestNetns::new("rd-f");
                let rt = host.runtime_conf(&id, &pod, 34999);
                host.del(backend, &rt)
                    .unwrap_or_else(|e| panic!("DEL after a failed ADD: {e}"));
                let left = host.leftovers_of(&[&id]);
                assert!(left.is_empty(), "{id} left: {left:#?}");
                assert_eq!(
                    host.host_veths().len(),
                    pods.live.len(),
                    "{id} left its veth"
                );
            }
        }
        pods.assert_intact(&format!("after ADD with {free_pages} pages free"));
        // The next ADD on a healthy disk works and takes a free address.
        pods.add(&format!("disk-after-{free_pages}")).unwrap();
        pods.assert_intact(&format!(
            "after the ADD that followed {free_pages} pages free"
        ));
    }
    assert!(out_of_space >= 2, "the disk never ran out mid-ADD");

    // Read-only.
    store.remount("ro");
    let pod = TestNetns::new("rd-r");
    let rt = host.runtime_conf("disk-ro", &pod, 34998);
    let err = host.add(backend, &rt).unwrap_err();
    let (code, text) = code_and_text(&err);
    assert_eq!(code, 5, "{text}");
    assert!(text.contains("Read-only file system"), "{text}");
    let (_, first_rt, _) = &pods.live[0];
    let err = host.del(backend, first_rt).unwrap_err();
    let (code, text) = code_and_text(&err);
    assert_eq!(code, 5, "{text}");
    store.remount("rw");
    host.del(backend, &rt).unwrap();
    // The runtime retries the DEL that failed.
    let (_, first_rt, _) = pods.live.remove(0);
    host.del(backend, &first_rt).unwrap();
    pods.assert_intact("after read-only");
    pods.add("disk-after-ro").unwrap();
    pods.assert_intact("after the ADD that followed read-only");

    for (_, rt, _) in &pods.live {
        host.del(backend, rt).unwrap();
    }
    pods.live.clear();
    let left = host.leftovers(&["disk-"], &baseline);
    assert!(left.is_empty(), "left: {left:#?}");
}
