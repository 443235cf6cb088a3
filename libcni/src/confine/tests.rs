use super::*;
use std::os::unix::fs::PermissionsExt;

/// Places allowing `dir/allowed` for every place, as a policy would.
fn places(dir: &Path) -> Places {
    let allowed = vec![dir.join("allowed")];
    let policy = Policy {
        allow: Allow {
            logs: allowed.clone(),
            device_info: allowed.clone(),
            state: allowed.clone(),
            credentials: allowed,
        },
        ..Policy::default()
    };
    Places::with_policy(policy, "/etc/cni/cni-rs-policy.json")
}

fn both_ways(test: impl Fn()) {
    test();
    FORCE_WALK.with(|f| f.set(true));
    test();
    FORCE_WALK.with(|f| f.set(false));
}

#[test]
fn paths_outside_the_places_are_refused_with_the_setting_that_allows_them() {
    let places = Places::default();
    let e = places
        .confine(
            "logFile",
            Place::Logs,
            Path::new("/root/.ssh/authorized_keys"),
        )
        .unwrap_err();
    assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
    assert_eq!(
        e.to_string(),
        "logFile \"/root/.ssh/authorized_keys\" is outside the folders allowed for logs \
         (/var/log/cni-rs); the node's administrator can allow a folder with \
         \"allow\": {\"logs\": [\"/folder\"]} in /etc/cni/cni-rs-policy.json"
    );
    // The allowed folder itself: its own message, not "outside" a list
    // that names it.
    let e = places
        .confine("logFile", Place::Logs, Path::new("/var/log/cni-rs"))
        .unwrap_err();
    assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
    assert_eq!(
        e.to_string(),
        "logFile \"/var/log/cni-rs\" is itself one of the folders allowed for logs, \
         which other networks share; name a folder inside it"
    );
    for (path, plain) in [
        ("/var/log/cni-rs/../../../etc/passwd", false),
        ("var/log/cni-rs/x.log", false),
        ("/var/log/cni-rs", false),
        ("/var/log/cni-rs-other/x.log", true),
        ("/var/log", true),
    ] {
        let e = places
            .confine("logFile", Place::Logs, Path::new(path))
            .unwrap_err();
        assert_eq!(
            matches!(e, ConfineError::Outside { .. }),
            plain,
            "{path}: {e}"
        );
    }
    let ok = places
        .confine("logFile", Place::Logs, Path::new("/var/log/cni-rs/a/b.log"))
        .unwrap();
    assert_eq!(ok.base(), Path::new("/var/log/cni-rs"));
    assert_eq!(ok.relative(), Path::new("a/b.log"));
    assert_eq!(ok.path(), Path::new("/var/log/cni-rs/a/b.log"));
    for (place, path) in [
        (
            Place::DeviceInfo,
            "/var/run/k8s.cni.cncf.io/devinfo/dp/x.json",
        ),
        (Place::DeviceInfo, "/run/k8s.cni.cncf.io/devinfo/x.json"),
        (Place::State, "/var/lib/cni/networks"),
        (Place::State, "/run/cni/tuning"),
        (Place::Credentials, "/etc/cni/cluster-ipam/ca.pem"),
    ] {
        assert!(
            places.confine("k", place, Path::new(path)).is_ok(),
            "{path}"
        );
    }
    assert!(places
        .confine(
            "caFile",
            Place::Credentials,
            Path::new("/etc/kubernetes/pki/etcd/ca.crt")
        )
        .is_err());
}

#[test]
fn opens_create_inside_and_refuse_symlinks_out() {
    both_ways(|| {
        let dir = tempfile::tempdir().unwrap();
        let places = places(dir.path());
        let allowed = dir.path().join("allowed");
        let path = allowed.join("sub/dir/file.log");
        let confined = places.confine("logFile", Place::Logs, &path).unwrap();
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::APPEND;
        let mut file = confined.open(flags, 0o600, Some(0o700)).unwrap();
        std::io::Write::write_all(&mut file, b"line\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"line\n");
        let mode = std::fs::metadata(allowed.join("sub"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);

        // A link inside the allowed folder pointing out of it, as the last
        // component or as a folder on the way.
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("victim"), b"keep").unwrap();
        std::os::unix::fs::symlink(outside.join("victim"), allowed.join("link.log")).unwrap();
        std::os::unix::fs::symlink(&outside, allowed.join("linkdir")).unwrap();
        for rel in ["link.log", "linkdir/victim"] {
            let confined = places
                .confine("logFile", Place::Logs, &allowed.join(rel))
                .unwrap();
            let e = confined.open(flags, 0o600, Some(0o700)).unwrap_err();
            assert_eq!(e.to_cni_error().code, ErrorCode::Io, "{rel}: {e}");
            // ELOOP from openat2 or O_NOFOLLOW; ENOTDIR where a folder on
            // the way is a link (O_NOFOLLOW | O_DIRECTORY).
            let ConfineError::Io { source, .. } = &e else {
                panic!("{rel}: {e}");
            };
            assert!(
                matches!(source.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)),
                "{rel}: {e}"
            );
        }
        let through_link = places
            .confine("logFile", Place::Logs, &allowed.join("linkdir/victim"))
            .unwrap();
        through_link.remove().unwrap_err();
        assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"keep");

        // remove() unlinks the link itself, never its target.
        let link = places
            .confine("logFile", Place::Logs, &allowed.join("link.log"))
            .unwrap();
        link.remove().unwrap();
        assert!(!allowed.join("link.log").exists());
        assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"keep");
        confined.remove().unwrap();
        assert!(!path.exists());
        confined.remove().unwrap();
    });
}

#[test]
fn the_policy_file_is_parsed_strictly_and_must_be_roots() {
    let dir = tempfile::tempdir().unwrap();
    let absent = Places::load(&dir.path().join("absent.json")).unwrap();
    assert_eq!(
        absent.allowed(Place::Logs),
        vec![PathBuf::from("/var/log/cni-rs")]
    );

    let path = dir.path().join("policy.json");
    std::fs::write(
        &path,
        br#"{"allow":{"logs":["/srv/log"],"state":["/srv/state"]}}"#,
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let places = Places::load(&path).unwrap();
    assert_eq!(
        places.allowed(Place::Logs),
        vec![PathBuf::from("/var/log/cni-rs"), PathBuf::from("/srv/log")]
    );
    assert!(places
        .confine("logFile", Place::Logs, Path::new("/srv/log/x"))
        .is_ok());
    let e = places
        .confine("logFile", Place::Logs, Path::new("/srv/state/x"))
        .unwrap_err();
    assert!(
        e.to_string().ends_with(&format!(" in {}", path.display())),
        "{e}"
    );

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let e = Places::load(&path).unwrap_err();
    assert!(e.to_string().contains("(owner 0, mode 666)"), "{e}");

    for (text, reason) in [
        (r#"{"allow":{"log":["/srv"]}}"#, "unknown field `log`"),
        (
            r#"{"allow":{"logs":["srv"]}}"#,
            "must be an absolute folder",
        ),
        (
            r#"{"allow":{"logs":["/srv/../etc"]}}"#,
            "must be an absolute folder",
        ),
        (r#"{"allow":{"logs":["/"]}}"#, "must be an absolute folder"),
    ] {
        let e = Policy::parse(text.as_bytes()).unwrap_err();
        assert!(e.contains(reason), "{text}: {e}");
    }
}

#[test]
fn a_settled_policy_file_is_read_once_and_again_when_it_changes() {
    use std::os::unix::fs::OpenOptionsExt;
    let reads = || super::POLICY_READS.with(|n| n.get());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.json");
    let write = |text: &str| {
        // In place (same inode): only the times and the size tell.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    };
    write(r#"{"allow":{"logs":["/srv/aaa"]}}"#);
    // Just written: not trusted yet, read every time.
    let start = reads();
    Places::load(&path).unwrap();
    Places::load(&path).unwrap();
    assert_eq!(reads() - start, 2);

    // Settled (two seconds on the file's clock): read once, then kept.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let start = reads();
    let first = Places::load(&path).unwrap();
    let second = Places::load(&path).unwrap();
    assert_eq!(reads() - start, 1);
    assert_eq!(first, second);
    assert_eq!(
        second.allowed(Place::Logs),
        vec![PathBuf::from("/var/log/cni-rs"), PathBuf::from("/srv/aaa")]
    );

    // Rewritten to the same size: new times, read again.
    write(r#"{"allow":{"logs":["/srv/bbb"]}}"#);
    let places = Places::load(&path).unwrap();
    assert_eq!(
        places.allowed(Place::Logs),
        vec![PathBuf::from("/var/log/cni-rs"), PathBuf::from("/srv/bbb")]
    );
    // Made writable by others: refused, not served from memory.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let e = Places::load(&path).unwrap_err();
    assert!(e.to_string().contains("(owner 0, mode 666)"), "{e}");
    // Removed: defaults.
    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        Places::load(&path).unwrap().allowed(Place::Logs),
        vec![PathBuf::from("/var/log/cni-rs")]
    );
}

#[test]
fn cluster_ipam_pins_are_parsed_and_checked() {
    let policy = Policy::parse(
        br#"{"clusterIpam":{"endpoints":["https://10.0.0.11:2379"],"prefix":"/cluster-ipam",
            "nodeName":"gpu-node-7","caFile":"/etc/cni/cluster-ipam/ca.pem",
            "username":"cni","passwordFile":"/etc/cni/cluster-ipam/password"}}"#,
    )
    .unwrap();
    let pin = policy.cluster_ipam.expect("the section");
    assert_eq!(
        pin.endpoints.as_deref(),
        Some(&["https://10.0.0.11:2379".to_string()][..])
    );
    assert_eq!(pin.prefix.as_deref(), Some("/cluster-ipam"));
    assert_eq!(pin.node_name.as_deref(), Some("gpu-node-7"));
    assert_eq!(
        pin.ca_file.as_deref(),
        Some(Path::new("/etc/cni/cluster-ipam/ca.pem"))
    );
    assert_eq!(pin.cert_file, None);
    assert_eq!(pin.username.as_deref(), Some("cni"));
    // Only the node name: allowed, the rest stays the configuration's.
    let only_node = Policy::parse(br#"{"clusterIpam":{"nodeName":"n1"}}"#).unwrap();
    assert_eq!(
        only_node.cluster_ipam.unwrap().node_name.as_deref(),
        Some("n1")
    );
    assert_eq!(Policy::parse(b"{}").unwrap().cluster_ipam, None);

    for (text, reason) in [
        (
            r#"{"clusterIpam":{"prefixx":"/a"}}"#,
            "unknown field `prefixx`",
        ),
        (
            r#"{"clusterIpam":{"endpoints":[]}}"#,
            "at least one endpoint",
        ),
        (
            r#"{"clusterIpam":{"endpoints":["http://a:1"],"prefix":"/p","caFile":"ca.pem"}}"#,
            "clusterIpam.caFile must be an absolute path",
        ),
        (
            r#"{"clusterIpam":{"caFile":"/etc/cni/cluster-ipam/ca.pem"}}"#,
            "not both endpoints and prefix",
        ),
        (
            r#"{"clusterIpam":{"endpoints":["http://a:1"],"username":"u","passwordFile":"/p/x"}}"#,
            "not both endpoints and prefix",
        ),
    ] {
        let e = Policy::parse(text.as_bytes()).unwrap_err();
        assert!(e.contains(reason), "{text}: {e}");
    }
}
