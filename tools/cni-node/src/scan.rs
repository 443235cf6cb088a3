//! What the node holds, read from disk: the conflist folder, libcni's
//! result cache (with each entry's age, from the file's mtime) and
//! host-local's lease folders of the networks found.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use libcni::cache::{NetworkAttachment, ResultCache};
use libcni::conf::{self, NetworkConfigList};
use libcni::plugin_conf::is_valid_cni_name;
use serde_json::Value;

use crate::error::Error;
use crate::plan::{Held, NetworkView};

/// host-local's lease folder when `ipam.dataDir` is not given.
pub const HOST_LOCAL_DATA_DIR: &str = "/var/lib/cni/networks";

/// One network as found on the node.
#[derive(Debug, Clone)]
pub struct Network {
    /// From the conflist folder; else the copy the newest cache entry
    /// recorded at ADD (a network whose file is gone).
    pub config: Option<NetworkConfigList>,
    pub from_folder: bool,
    /// The cached attachments, with their file's age.
    pub cached: Vec<(NetworkAttachment, Option<Duration>)>,
    /// host-local lease holders (container ID, ifname, lease file age).
    pub leases: Vec<Held>,
}

impl Network {
    pub fn view(&self) -> NetworkView {
        NetworkView {
            cached: self
                .cached
                .iter()
                .map(|(a, age)| Held {
                    container_id: a.container_id.clone(),
                    ifname: a.ifname.clone(),
                    age: *age,
                })
                .collect(),
            uncached: self.leases.clone(),
            has_config: self.config.as_ref().is_some_and(|c| !c.plugins.is_empty()),
            gc_disabled: self.config.as_ref().is_some_and(|c| c.disable_gc),
        }
    }
}

/// The networks of the conflist folder and of the cache, by name.
pub fn networks(
    conf_dir: &Path,
    cache: &ResultCache,
    now: SystemTime,
) -> Result<BTreeMap<String, Network>, Error> {
    let mut found: BTreeMap<String, Network> = BTreeMap::new();
    for list in folder_networks(conf_dir)? {
        found.entry(list.name.clone()).or_insert_with(|| Network {
            config: Some(list),
            from_folder: true,
            cached: Vec::new(),
            leases: Vec::new(),
        });
    }
    let attachments = cache.attachments("").map_err(Error::Cache)?;
    for att in attachments {
        let age = cache
            .file_path(&att.network, &att.container_id, &att.ifname)
            .ok()
            .and_then(|p| file_age(&p, now));
        let net = found.entry(att.network.clone()).or_insert_with(|| Network {
            config: None,
            from_folder: false,
            cached: Vec::new(),
            leases: Vec::new(),
        });
        net.cached.push((att, age));
    }
    for (name, net) in found.iter_mut() {
        if net.config.is_none() {
            net.config = newest_cached_config(&net.cached);
        }
        if let Some(config) = &net.config {
            net.leases = host_local_leases(name, config, now);
        }
    }
    Ok(found)
}

/// Every network configuration in the folder: `*.conflist` first, then
/// single-plugin `*.conf` and `*.json` (as libcni's loader looks them
/// up); the first file of a name wins. A file that does not parse is
/// logged and skipped: its network, if cached, is run with the cached
/// copy.
fn folder_networks(dir: &Path) -> Result<Vec<NetworkConfigList>, Error> {
    let mut lists = Vec::new();
    let conflists = conf::conf_files(dir, &[".conflist"]).map_err(Error::ConfDir)?;
    for file in conflists {
        match conf::conflist_from_file(&file) {
            Ok(list) => lists.push(list),
            Err(e) => log::warn!("skipping {}: {e}", file.display()),
        }
    }
    let singles = conf::conf_files(dir, &[".conf", ".json"]).map_err(Error::ConfDir)?;
    for file in singles {
        match conf::plugin_conf_from_file(&file).and_then(|c| conf::conflist_from_conf(&c)) {
            Ok(list) => lists.push(list),
            Err(e) => log::warn!("skipping {}: {e}", file.display()),
        }
    }
    Ok(lists)
}

/// The configuration recorded by the most recent ADD of the network.
fn newest_cached_config(
    cached: &[(NetworkAttachment, Option<Duration>)],
) -> Option<NetworkConfigList> {
    let mut by_age: Vec<&(NetworkAttachment, Option<Duration>)> = cached.iter().collect();
    by_age.sort_by_key(|(_, age)| age.unwrap_or(Duration::MAX));
    by_age.into_iter().find_map(|(att, _)| {
        conf::conflist_from_bytes(&att.config)
            .ok()
            .filter(|l| !l.plugins.is_empty())
            .or_else(|| {
                conf::plugin_conf_from_bytes(&att.config)
                    .and_then(|c| conf::conflist_from_conf(&c))
                    .ok()
            })
    })
}

/// How long ago a file was last modified; `None` when that cannot be told
/// (or the clock stands before it: then it is as young as can be).
pub fn file_age(path: &Path, now: SystemTime) -> Option<Duration> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    now.duration_since(modified).ok()
}

/// The lease folders of the network's host-local IPAM sections.
pub fn host_local_dirs(network: &str, config: &NetworkConfigList) -> Vec<PathBuf> {
    if !is_valid_cni_name(network) {
        return Vec::new();
    }
    let mut dirs: Vec<PathBuf> = config
        .plugins
        .iter()
        .filter_map(|p| p.raw().get("ipam"))
        .filter(|ipam| ipam.get("type").and_then(Value::as_str) == Some("host-local"))
        .map(|ipam| {
            let data_dir = ipam
                .get("dataDir")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty())
                .unwrap_or(HOST_LOCAL_DATA_DIR);
            Path::new(data_dir).join(network)
        })
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

/// The holders of the network's host-local leases: files named by an
/// address holding `<containerID>\r\n<ifname>`. Legacy leases naming only
/// a container are left out (they name no attachment; host-local keeps
/// them while the container has any valid one).
fn host_local_leases(network: &str, config: &NetworkConfigList, now: SystemTime) -> Vec<Held> {
    let mut held = Vec::new();
    for dir in host_local_dirs(network, config) {
        for (path, _) in lease_files(&dir) {
            let Some((container_id, ifname)) = read_lease(&path) else {
                continue;
            };
            held.push(Held {
                container_id,
                ifname,
                age: file_age(&path, now),
            });
        }
    }
    held.sort();
    held.dedup();
    held
}

/// The lease files of a host-local folder (regular files named by an IP
/// address), with the address.
pub fn lease_files(dir: &Path) -> Vec<(PathBuf, std::net::IpAddr)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let ip = e.file_name().to_str()?.parse().ok()?;
            Some((e.path(), ip))
        })
        .collect()
}

/// A lease's holder, when it names an attachment. Lease files are a few
/// dozen bytes; more is not a lease.
fn read_lease(path: &Path) -> Option<(String, String)> {
    let data = std::fs::read(path).ok()?;
    if data.len() > 4096 {
        return None;
    }
    parse_lease(&String::from_utf8_lossy(&data))
}

fn parse_lease(text: &str) -> Option<(String, String)> {
    let (id, ifname) = text.trim().split_once('\n')?;
    let (id, ifname) = (id.trim(), ifname.trim());
    if id.is_empty() || ifname.is_empty() || ifname.contains('\n') {
        return None;
    }
    Some((id.to_string(), ifname.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_content_names_an_attachment_or_nothing() {
        assert_eq!(
            parse_lease("abc\r\neth0"),
            Some(("abc".to_string(), "eth0".to_string()))
        );
        assert_eq!(
            parse_lease(" abc\neth0\n"),
            Some(("abc".to_string(), "eth0".to_string()))
        );
        assert_eq!(parse_lease("abc"), None);
        assert_eq!(parse_lease(""), None);
        assert_eq!(parse_lease("a\nb\nc"), None);
    }

    #[test]
    fn lease_dirs_follow_each_host_local_section() {
        let list = conf::conflist_from_bytes(
            br#"{"cniVersion":"1.1.0","name":"n1","plugins":[
                {"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]]}},
                {"type":"macvlan","ipam":{"type":"host-local","dataDir":"/tmp/x"}},
                {"type":"ptp","ipam":{"type":"static"}}]}"#,
        )
        .unwrap();
        assert_eq!(
            host_local_dirs("n1", &list),
            vec![
                PathBuf::from("/tmp/x/n1"),
                PathBuf::from("/var/lib/cni/networks/n1")
            ]
        );
        assert!(host_local_dirs("../n1", &list).is_empty());
    }

    #[test]
    fn folder_and_cache_networks_are_merged_with_ages() {
        let dir = tempfile::tempdir().unwrap();
        let conf_dir = dir.path().join("net.d");
        std::fs::create_dir(&conf_dir).unwrap();
        let leases = dir.path().join("leases");
        let conflist = format!(
            r#"{{"cniVersion":"1.1.0","name":"infolder","plugins":[{{"type":"bridge","ipam":{{"type":"host-local","dataDir":"{}"}}}}]}}"#,
            leases.display()
        );
        std::fs::write(conf_dir.join("10-a.conflist"), &conflist).unwrap();
        std::fs::write(conf_dir.join("20-broken.conflist"), "{").unwrap();
        std::fs::create_dir_all(leases.join("infolder")).unwrap();
        std::fs::write(leases.join("infolder/10.1.0.5"), "crashed\r\neth0").unwrap();
        std::fs::write(leases.join("infolder/last_reserved_ip.0"), "10.1.0.5").unwrap();

        let cache = ResultCache::new(dir.path().join("cache"));
        let gone_conf = br#"{"cniVersion":"1.0.0","name":"gone","plugins":[{"type":"ptp"}]}"#;
        cache
            .write(&libcni::cache::CacheEntry {
                kind: libcni::cache::CACHE_KIND_V1.into(),
                container_id: "c1".into(),
                config: gone_conf.to_vec(),
                ifname: "eth0".into(),
                network_name: "gone".into(),
                netns: String::new(),
                cni_args: Vec::new(),
                capability_args: Default::default(),
                result: None,
            })
            .unwrap();
        let later = SystemTime::now() + Duration::from_secs(3600);
        let found = networks(&conf_dir, &cache, later).unwrap();
        assert_eq!(found.keys().collect::<Vec<_>>(), ["gone", "infolder"]);

        let gone = &found["gone"];
        assert!(!gone.from_folder);
        assert_eq!(gone.config.as_ref().unwrap().plugins.len(), 1);
        let view = gone.view();
        assert_eq!(view.cached.len(), 1);
        assert_eq!(view.cached[0].container_id, "c1");
        let age = view.cached[0].age.unwrap();
        assert!(age >= Duration::from_secs(3590), "{age:?}");

        let infolder = found["infolder"].view();
        assert!(infolder.has_config);
        assert!(infolder.cached.is_empty());
        assert_eq!(infolder.uncached.len(), 1);
        assert_eq!(infolder.uncached[0].container_id, "crashed");
        assert_eq!(infolder.uncached[0].ifname, "eth0");
    }
}
