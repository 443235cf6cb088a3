use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libcni::confine::{Allow, Policy};

use super::*;

fn store(data_dir: &Path) -> StoreConfig {
    StoreConfig {
        network: "net1".to_string(),
        data_dir: data_dir.to_path_buf(),
        lock_timeout: Duration::from_secs(1),
        range_sets: 1,
    }
}

/// Places allowing `folder` for state, as a node policy would.
fn allowing(folder: &Path) -> impl FnOnce() -> Result<Places, ConfineError> {
    let policy = Policy {
        allow: Allow {
            state: vec![folder.to_path_buf()],
            ..Allow::default()
        },
        ..Policy::default()
    };
    move || Ok(Places::with_policy(policy, "/test/policy.json"))
}

fn refused(data_dir: &Path, create: bool, allowed: &Path) -> String {
    let e = confine_with(&store(data_dir), create, allowing(allowed)).unwrap_err();
    assert!(is_config_error(&e), "{e}");
    e.to_string()
}

#[test]
fn a_folder_outside_the_state_folders_is_refused_naming_the_setting() {
    let tmp = tempfile::tempdir().unwrap();
    let allowed = tmp.path().join("allowed");
    let e = refused(Path::new("/etc/cni-rs-absent"), true, &allowed);
    assert_eq!(
        e,
        format!(
            "ipam.dataDir \"/etc/cni-rs-absent\" is outside the folders allowed for state \
             (/var/lib/cni, /run/cni, {}); the node's administrator can allow a folder with \
             \"allow\": {{\"state\": [\"/folder\"]}} in /test/policy.json",
            allowed.display()
        )
    );
    assert!(!Path::new("/etc/cni-rs-absent").exists());
}

#[test]
fn relative_and_dotted_folders_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let e = refused(Path::new("leases"), true, tmp.path());
    assert_eq!(
        e,
        "ipam.dataDir \"leases\" must be an absolute path without \".\" or \"..\" components"
    );
    let dotted = tmp.path().join("a/../../x");
    let e = refused(&dotted, true, tmp.path());
    assert!(e.contains("must be an absolute path without"), "{e}");
}

#[test]
fn an_allowed_folder_is_made_for_add_and_may_be_the_allowed_folder_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let allowed = tmp.path().join("cni-ipam-state");
    confine_with(&store(&allowed), true, allowing(&allowed)).unwrap();
    assert!(allowed.join("net1").is_dir());
    let deeper = allowed.join("a/b");
    confine_with(&store(&deeper), true, allowing(&allowed)).unwrap();
    assert!(deeper.join("net1").is_dir());
    // Verbs other than ADD make nothing and find nothing to refuse.
    let absent = allowed.join("absent");
    confine_with(&store(&absent), false, allowing(&allowed)).unwrap();
    assert!(!absent.exists());
}

#[test]
fn a_link_inside_the_allowed_folder_is_not_followed_out_of_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (allowed, outside) = (tmp.path().join("allowed"), tmp.path().join("outside"));
    std::fs::create_dir_all(&allowed).unwrap();
    std::fs::create_dir_all(outside.join("net1")).unwrap();
    symlink(&outside, allowed.join("link")).unwrap();
    for create in [true, false] {
        let e = refused(&allowed.join("link"), create, &allowed);
        assert_eq!(
            e,
            format!(
                "ipam.dataDir {:?} is reached through a symbolic link or a file, \
                 which is not followed inside the allowed folders",
                allowed.join("link")
            )
        );
    }
    // The network's folder itself a link.
    let data = allowed.join("data");
    std::fs::create_dir_all(&data).unwrap();
    symlink(outside.join("net1"), data.join("net1")).unwrap();
    let e = refused(&data, false, &allowed);
    assert!(e.contains("is reached through a symbolic link"), "{e}");
    let entries: Vec<PathBuf> = std::fs::read_dir(outside.join("net1"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(entries.is_empty(), "{entries:?}");
}

#[test]
fn the_default_folder_needs_no_policy() {
    // The node's places are not asked for: the defaults accept it (and a
    // missing folder is fine for verbs other than ADD).
    let store = store(Path::new("/var/lib/cni/cni-rs-test-absent"));
    confine_with(&store, false, || -> Result<Places, ConfineError> {
        panic!("the policy was read for a folder of the defaults")
    })
    .unwrap();
}
