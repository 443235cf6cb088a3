//! Configuration loading: files on disk, list parsing, version selection
//! and injection.

use std::fs;
use std::path::{Path, PathBuf};

use libcni::conf::{
    conf_files, conflist_from_bytes, conflist_from_conf, conflist_from_file, inject_conf,
    load_network_conf, plugin_conf_from_bytes, ConfError,
};
use serde_json::{json, Map, Value};

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(&path, content).unwrap();
    path
}

fn conflist(name: &str, plugin_type: &str) -> String {
    json!({"cniVersion": "1.0.0", "name": name, "plugins": [{"type": plugin_type}]}).to_string()
}

fn conf(name: &str, plugin_type: &str) -> String {
    json!({"cniVersion": "0.4.0", "name": name, "type": plugin_type}).to_string()
}

fn types_of(list: &libcni::conf::NetworkConfigList) -> Vec<&str> {
    list.plugins.iter().map(|p| p.plugin_type()).collect()
}

#[test]
fn conf_files_lists_matching_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "b.conf", "{}");
    write(d, "a.json", "{}");
    write(d, "c.conflist", "{}");
    write(d, "d.conf.bak", "{}");
    write(d, ".conf", "{}");
    write(d, "noext", "{}");
    write(d, "sub/e.conf", "{}");
    fs::create_dir(d.join("dir.conf")).unwrap();

    let found = conf_files(d, &[".conf", ".json"]).unwrap();
    assert_eq!(
        found,
        vec![d.join(".conf"), d.join("a.json"), d.join("b.conf")]
    );
    assert_eq!(
        conf_files(d, &[".conflist"]).unwrap(),
        vec![d.join("c.conflist")]
    );
    assert!(conf_files(&d.join("missing"), &[".conf"])
        .unwrap()
        .is_empty());
}

#[test]
fn load_network_conf_prefers_lists_then_falls_back_to_single_configs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "10-net.conflist", &conflist("net", "from-list"));
    write(d, "05-net.conf", &conf("net", "from-conf"));
    write(d, "20-single.json", &conf("single", "from-json"));

    let list = load_network_conf(d, "net").unwrap();
    assert_eq!(types_of(&list), vec!["from-list"]);

    let list = load_network_conf(d, "single").unwrap();
    assert_eq!(list.name, "single");
    assert_eq!(list.cni_version, "0.4.0");
    assert_eq!(types_of(&list), vec!["from-json"]);

    let err = load_network_conf(d, "absent").unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "no net configuration with name \"absent\" in {}",
            d.display()
        )
    );
}

#[test]
fn load_network_conf_takes_the_first_list_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "20-b.conflist", &conflist("net", "second"));
    write(dir.path(), "10-a.conflist", &conflist("net", "first"));
    let list = load_network_conf(dir.path(), "net").unwrap();
    assert_eq!(types_of(&list), vec!["first"]);
}

#[test]
fn load_network_conf_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    let missing = d.join("missing");
    let err = load_network_conf(&missing, "net").unwrap_err();
    assert!(matches!(err, ConfError::NoConfigsFound { .. }));
    assert_eq!(
        err.to_string(),
        format!("no net configurations found in {}", missing.display())
    );

    // Only lists, none matching: not found rather than "no configs".
    write(d, "a.conflist", &conflist("other", "x"));
    assert!(matches!(
        load_network_conf(d, "net").unwrap_err(),
        ConfError::NotFound { .. }
    ));

    // Configurations in a nested directory are not found.
    write(d, "nested/b.conflist", &conflist("net", "x"));
    write(d, "nested/c.conf", &conf("net", "x"));
    assert!(matches!(
        load_network_conf(d, "net").unwrap_err(),
        ConfError::NotFound { .. }
    ));

    // A malformed list aborts the search even if a later one matches.
    write(d, "0-bad.conflist", "{not json");
    write(d, "9-good.conflist", &conflist("net", "x"));
    let err = load_network_conf(d, "net").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("error parsing configuration list: "),
        "{err}"
    );
}

#[test]
fn a_malformed_single_config_aborts_the_fallback() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.conf", "{not json");
    write(dir.path(), "b.conf", &conf("net", "x"));
    let err = load_network_conf(dir.path(), "net").unwrap_err();
    assert!(err.to_string().starts_with("error parsing configuration: "));

    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.conf", r#"{"name":"net"}"#);
    let err = load_network_conf(dir.path(), "net").unwrap_err();
    assert_eq!(
        err.to_string(),
        "error parsing configuration: missing 'type'"
    );
}

#[test]
fn booleans_may_be_strings() {
    for key in ["disableCheck", "disableGC", "loadOnlyInlinedPlugins"] {
        let parse = |v: Value| {
            let mut obj = json!({"name": "n", "cniVersion": "1.1.0", "plugins": [{"type": "t"}]});
            obj[key] = v;
            conflist_from_bytes(obj.to_string().as_bytes())
        };
        let get = |l: &libcni::conf::NetworkConfigList| match key {
            "disableCheck" => l.disable_check,
            "disableGC" => l.disable_gc,
            _ => l.load_only_inlined_plugins,
        };
        assert!(get(&parse(json!(true)).unwrap()));
        assert!(get(&parse(json!("true")).unwrap()));
        assert!(get(&parse(json!("True")).unwrap()));
        assert!(!get(&parse(json!("FALSE")).unwrap()));
        assert!(!get(&parse(json!(false)).unwrap()));
        assert_eq!(
            parse(json!("maybe")).unwrap_err().to_string(),
            format!("error parsing configuration list: invalid value \"maybe\" for {key}")
        );
        assert_eq!(
            parse(json!(1)).unwrap_err().to_string(),
            format!("error parsing configuration list: invalid type number for {key}")
        );
    }
    let l = conflist_from_bytes(br#"{"name":"n","plugins":[{"type":"t"}]}"#).unwrap();
    assert!(!l.disable_check && !l.disable_gc && !l.load_only_inlined_plugins);
}

#[test]
fn list_parse_errors() {
    let cases: [(&str, &str); 8] = [
        ("{not json", "error parsing configuration list: "),
        (
            r#"[1]"#,
            "error parsing configuration list: expected an object",
        ),
        (
            r#"{"plugins":[{"type":"t"}]}"#,
            "error parsing configuration list: no name",
        ),
        (
            r#"{"name":5}"#,
            "error parsing configuration list: invalid name type number",
        ),
        (
            r#"{"name":"n","cniVersion":1}"#,
            "error parsing configuration list: invalid cniVersion type number",
        ),
        (
            r#"{"name":"n","plugins":{}}"#,
            "error parsing configuration list: invalid 'plugins' type object",
        ),
        (
            r#"{"name":"n","plugins":[]}"#,
            "error parsing configuration list: no plugins in list",
        ),
        (
            r#"{"name":"n","plugins":[{"type":"a"},{"name":"x"}]}"#,
            "failed to parse plugin config 1: error parsing configuration: missing 'type'",
        ),
    ];
    for (input, prefix) in cases {
        let err = conflist_from_bytes(input.as_bytes()).unwrap_err();
        assert!(err.to_string().starts_with(prefix), "{input}: {err}");
    }
}

#[test]
fn plugin_conf_keeps_unknown_keys_and_reads_capabilities() {
    let p = plugin_conf_from_bytes(
        br#"{"type":"portmap","capabilities":{"portMappings":true,"x":false},"snat":true,"conditionsV4":["a"]}"#,
    )
    .unwrap();
    assert_eq!(p.plugin_type(), "portmap");
    assert_eq!(
        p.enabled_capabilities().collect::<Vec<_>>(),
        vec!["portMappings"]
    );
    assert_eq!(p.raw()["snat"], json!(true));
    assert_eq!(p.raw()["conditionsV4"], json!(["a"]));

    assert_eq!(
        plugin_conf_from_bytes(br#"{"name":"x"}"#)
            .unwrap_err()
            .to_string(),
        "error parsing configuration: missing 'type'"
    );
    assert!(plugin_conf_from_bytes(br#"{"type":"t","capabilities":{"a":"yes"}}"#).is_err());
}

#[test]
fn inlined_plugins_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "net/10-b.conf", r#"{"type":"sibling-b"}"#);
    write(d, "net/05-a.conf", r#"{"type":"sibling-a","extra":1}"#);
    write(d, "net/ignored.json", r#"{"type":"not-a-conf"}"#);
    write(d, "net/deeper/x.conf", r#"{"type":"too-deep"}"#);

    // Plugins given and merging allowed (the default): inline ones first.
    let path = write(
        d,
        "merge.conflist",
        &json!({"name": "net", "cniVersion": "1.0.0", "plugins": [{"type": "inline"}]}).to_string(),
    );
    let list = conflist_from_file(&path).unwrap();
    assert_eq!(types_of(&list), vec!["inline", "sibling-a", "sibling-b"]);
    assert_eq!(list.plugins[1].raw()["extra"], json!(1));

    // loadOnlyInlinedPlugins: the folder is ignored.
    let path = write(
        d,
        "inline.conflist",
        &json!({"name": "net", "loadOnlyInlinedPlugins": true, "plugins": [{"type": "inline"}]})
            .to_string(),
    );
    assert_eq!(
        types_of(&conflist_from_file(&path).unwrap()),
        vec!["inline"]
    );

    // No plugins key, merging allowed: the folder supplies them all.
    let path = write(
        d,
        "folder.conflist",
        r#"{"name":"net","cniVersion":"1.0.0"}"#,
    );
    assert_eq!(
        types_of(&conflist_from_file(&path).unwrap()),
        vec!["sibling-a", "sibling-b"]
    );

    // No plugins key with loadOnlyInlinedPlugins: an error.
    let err =
        conflist_from_bytes(br#"{"name":"net","loadOnlyInlinedPlugins":"true"}"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "error parsing configuration list: `loadOnlyInlinedPlugins` is true, and no 'plugins' key"
    );
    // ... but parsing bytes alone is fine without one when merging is allowed.
    assert!(conflist_from_bytes(br#"{"name":"net"}"#)
        .unwrap()
        .plugins
        .is_empty());
}

#[test]
fn sibling_folder_edge_cases() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // No plugins anywhere.
    let path = write(d, "lonely.conflist", r#"{"name":"lonely"}"#);
    assert_eq!(
        conflist_from_file(&path).unwrap_err().to_string(),
        "no plugin configs found"
    );
    fs::create_dir(d.join("lonely")).unwrap();
    assert!(matches!(
        conflist_from_file(&path).unwrap_err(),
        ConfError::NoPlugins
    ));

    // Inline plugins and an empty or missing folder: fine.
    let path = write(d, "a.conflist", r#"{"name":"a","plugins":[{"type":"x"}]}"#);
    assert_eq!(types_of(&conflist_from_file(&path).unwrap()), vec!["x"]);
    fs::create_dir(d.join("a")).unwrap();
    assert_eq!(types_of(&conflist_from_file(&path).unwrap()), vec!["x"]);

    // A sibling without a type is an error.
    write(d, "a/bad.conf", r#"{"name":"x"}"#);
    assert_eq!(
        conflist_from_file(&path).unwrap_err().to_string(),
        "error parsing configuration: missing 'type'"
    );

    // A network name is never used to leave the directory.
    let inner = d.join("inner");
    fs::create_dir(&inner).unwrap();
    write(d, "escape/x.conf", r#"{"type":"escaped"}"#);
    let path = write(
        &inner,
        "evil.conflist",
        r#"{"name":"../escape","plugins":[{"type":"x"}]}"#,
    );
    assert_eq!(types_of(&conflist_from_file(&path).unwrap()), vec!["x"]);
}

fn selected(input: Value) -> Result<String, ConfError> {
    let mut obj = input;
    obj["name"] = json!("test");
    obj["plugins"] = json!([{"type": "foo"}]);
    conflist_from_bytes(obj.to_string().as_bytes()).map(|l| l.cni_version)
}

#[test]
fn version_selection() {
    assert_eq!(
        selected(json!({"cniVersions": ["1.1.0", "0.4.0", "1.0.0"]})).unwrap(),
        "1.1.0"
    );
    // Versions newer than this library are skipped.
    assert_eq!(
        selected(json!({"cniVersions": ["99.0.0", "1.1.0", "0.4.0", "1.0.0"]})).unwrap(),
        "1.1.0"
    );
    assert!(selected(json!({"cniVersions": ["1.1.0", "0.4.0", "1.0.f"]})).is_err());
    // Without cniVersions, cniVersion is taken as written.
    assert_eq!(selected(json!({"cniVersion": "1.2.3"})).unwrap(), "1.2.3");
    assert_eq!(
        selected(json!({"cniVersion": "1.0.0", "cniVersions": ["0.1.0", "0.4.0"]})).unwrap(),
        "1.0.0"
    );
    assert_eq!(
        selected(json!({"cniVersion": "0.3.1", "cniVersions": ["0.4.0", "1.0.0"]})).unwrap(),
        "1.0.0"
    );
    // A too-new cniVersion loses to a usable cniVersions entry...
    assert_eq!(
        selected(json!({"cniVersion": "2.0.0", "cniVersions": ["0.4.0"]})).unwrap(),
        "0.4.0"
    );
    // ... and stays when nothing qualifies.
    assert_eq!(
        selected(json!({"cniVersion": "2.0.0", "cniVersions": ["3.0.0"]})).unwrap(),
        "2.0.0"
    );
    assert_eq!(selected(json!({"cniVersions": []})).unwrap(), "");
    assert!(selected(json!({"cniVersion": "x", "cniVersions": ["1.0.0"]})).is_err());
    assert_eq!(
        selected(json!({"cniVersions": "1.0.0"}))
            .unwrap_err()
            .to_string(),
        "error parsing configuration list: invalid type for cniVersions: string"
    );
    assert_eq!(
        selected(json!({"cniVersions": ["1.0.0", 2]}))
            .unwrap_err()
            .to_string(),
        "error parsing configuration list: invalid type for cniVersions index 1: number"
    );
    // The short form is compared as the release it denotes.
    assert_eq!(
        selected(json!({"cniVersions": ["1.0", "0.4.0"]})).unwrap(),
        "1.0"
    );
}

#[test]
fn inject_conf_sets_keys_and_validates() {
    let p = plugin_conf_from_bytes(br#"{"type":"bridge","name":"old","keep":{"a":1}}"#).unwrap();
    let mut values = Map::new();
    values.insert("name".into(), json!("new"));
    values.insert("added".into(), json!([1, "two"]));
    let injected = inject_conf(&p, &values).unwrap();
    assert_eq!(injected.name(), "new");
    let reparsed: Value = serde_json::from_slice(injected.bytes()).unwrap();
    assert_eq!(
        reparsed,
        json!({"type": "bridge", "name": "new", "keep": {"a": 1}, "added": [1, "two"]})
    );
    // The original is untouched.
    assert_eq!(p.name(), "old");

    let mut empty_key = Map::new();
    empty_key.insert(String::new(), json!(1));
    assert_eq!(
        inject_conf(&p, &empty_key).unwrap_err().to_string(),
        "keys cannot be empty"
    );
    let mut null_value = Map::new();
    null_value.insert("x".into(), Value::Null);
    assert_eq!(
        inject_conf(&p, &null_value).unwrap_err().to_string(),
        "key 'x' value must not be nil"
    );
    let mut no_type = Map::new();
    no_type.insert("type".into(), json!(""));
    assert!(inject_conf(&p, &no_type).is_err());
}

#[test]
fn single_config_upconverts_to_a_list() {
    let p = plugin_conf_from_bytes(
        br#"{"name":"some-plugin","cniVersion":"0.3.1","type":"foobar","extra":{"x":true}}"#,
    )
    .unwrap();
    let list = conflist_from_conf(&p).unwrap();
    assert_eq!(list.name, "some-plugin");
    assert_eq!(list.cni_version, "0.3.1");
    assert_eq!(list.plugins.len(), 1);
    assert_eq!(list.plugins[0].raw(), p.raw());
    let again = conflist_from_bytes(&list.bytes).unwrap();
    assert_eq!(again, list);
}
