//! The shipped examples are valid cluster-ipam configurations, and the
//! Multus definition carries the same network as the conflist.

use serde_json::Value;

fn repo(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn conflist() -> Value {
    let text = std::fs::read(repo(
        "conflist-examples/70-rdma-sriov-cluster-ipam.conflist",
    ))
    .unwrap();
    serde_json::from_slice(&text).unwrap()
}

/// The JSON under `config: |` of a NetworkAttachmentDefinition: the
/// indented block after that line.
fn nad_config(yaml: &str) -> Value {
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "config: |").skip(1);
    let first = lines.next().expect("config block");
    let indent = first.len() - first.trim_start().len();
    let mut json = String::from(first.trim_start());
    for line in lines {
        if !line.trim().is_empty() && line.len() - line.trim_start().len() < indent {
            break;
        }
        json.push('\n');
        json.push_str(line.get(indent..).unwrap_or(""));
    }
    serde_json::from_str(&json).expect("the config block is JSON")
}

#[test]
fn the_gpu_fabric_example_is_a_valid_configuration() {
    let list = conflist();
    let mut net = list["plugins"][0].clone();
    net["name"] = list["name"].clone();
    net["cniVersion"] = list["cniVersion"].clone();
    net["ipam"]["nodeName"] = "node-1".into();
    let config = cluster_ipam::config::AddConfig::from_value(&net, None).expect("valid");
    assert_eq!(config.cluster.etcd.endpoints.len(), 3);
    assert!(config.cluster.etcd.uses_tls());
    assert_eq!(config.cluster.grid.block_size, 26);
}

#[test]
fn the_multus_definition_carries_the_conflist() {
    let yaml = std::fs::read_to_string(repo("deploy/multus/gpu-fabric-rail0.yaml")).unwrap();
    assert!(yaml.contains("kind: NetworkAttachmentDefinition"));
    assert_eq!(nad_config(&yaml), conflist());
}
