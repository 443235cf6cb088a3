//! Configuration parsing, plugin side and runtime side: every plugin's own
//! keys (bridge, host-local, portmap, rdma-sriov) through their library
//! APIs, the shared keys and prevResult, and the runtime's config list
//! loading and per-plugin config building. None may panic.
//!
//! Input: the first line is CNI_ARGS, the rest the configuration.

#![no_main]

use libcni::conf::{conflist_from_bytes, plugin_conf_from_bytes};
use libcni::plugin_conf::PluginConf;
use libcni::runtime::{build_one_config, RuntimeConf};
use libcni::types::v100;
use libfuzzer_sys::fuzz_target;

fn plugin_side(bytes: &[u8], cni_args: &str) {
    let _ = host_local::config::IpamConfig::from_slice(bytes, None);
    let _ = host_local::config::IpamConfig::from_slice(bytes, Some(cni_args));
    let _ = host_local::config::StoreConfig::from_slice(bytes);
    let Ok(conf) = PluginConf::from_slice(bytes) else {
        return;
    };
    let _ = bridge::config::BridgeConf::from_conf(&conf, cni_args);
    let _ = bridge::config::TeardownConf::from_conf(&conf);
    let _ = portmap::config::PortMapConf::from_plugin_conf(&conf);
    let _ = rdma_sriov::config::NetConf::parse(&conf, cni_args);
    let _ = rdma_sriov::config::Locations::from_conf(&conf);
    if let Ok(Some(prev)) = conf.prev_result() {
        if let Ok(current) = v100::Result::try_from(prev) {
            let _ = portmap::config::ContainerIps::from_result(&current, "eth0");
        }
    }
}

fn runtime_side(bytes: &[u8]) {
    let mut rt = RuntimeConf {
        container_id: "fuzz".into(),
        netns: "/nonexistent".into(),
        ifname: "eth0".into(),
        ..RuntimeConf::default()
    };
    rt.capability_args.insert(
        "portMappings".into(),
        serde_json::json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
    );
    if let Ok(list) = conflist_from_bytes(bytes) {
        for plugin in &list.plugins {
            if let Ok(built) =
                build_one_config(&list.name, &list.cni_version, plugin, None, Some(&rt))
            {
                // What a plugin of the list is handed goes through the
                // plugin side too.
                plugin_side(built.bytes(), "");
            }
        }
    }
    let _ = plugin_conf_from_bytes(bytes);
}

fuzz_target!(|data: &[u8]| {
    let (args, conf) = match data.iter().position(|b| *b == b'\n') {
        Some(end) => (&data[..end], &data[end + 1..]),
        None => (&data[..0], data),
    };
    let cni_args = String::from_utf8_lossy(args);
    plugin_side(conf, &cni_args);
    runtime_side(conf);
});
