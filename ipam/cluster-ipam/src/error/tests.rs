use super::*;
use std::time::Duration;

#[test]
fn codes() {
    let ip: IpAddr = "10.0.0.1".parse().unwrap();
    let cases: Vec<(Error, u32)> = vec![
        (ConfigError::NoEndpoints.into(), 7),
        (ConfigError::Ranges(RangeConfigError::NoRanges).into(), 7),
        (
            ConfigError::Ranges(RangeConfigError::InvalidEnvIp("x".into())).into(),
            4,
        ),
        (
            EtcdError::Unreachable {
                timeout: Duration::from_secs(1),
                outcomes: "e: no answer in time".into(),
            }
            .into(),
            11,
        ),
        (
            EtcdError::Refused {
                endpoint: "e".into(),
                message: "m".into(),
            }
            .into(),
            7,
        ),
        (
            EtcdError::Tls {
                endpoint: "e".into(),
                message: "m".into(),
            }
            .into(),
            7,
        ),
        (
            EtcdError::File {
                key: "caFile",
                path: "/x".into(),
                source: std::io::Error::from_raw_os_error(2),
            }
            .into(),
            5,
        ),
        (
            EtcdError::UnusableFile {
                key: "caFile",
                path: "/x".into(),
                why: "w".into(),
            }
            .into(),
            7,
        ),
        (
            StateError::OtherNode {
                path: "/x".into(),
                recorded: "a".into(),
                configured: "b".into(),
            }
            .into(),
            7,
        ),
        (
            StateError::Corrupt {
                path: "/x".into(),
                detail: "d".into(),
            }
            .into(),
            5,
        ),
        (
            Error::GridMismatch {
                network: "n".into(),
                etcd: "e".into(),
                ours: "o".into(),
            },
            7,
        ),
        (
            Error::PoolExhausted {
                network: "n".into(),
                ranges: "r".into(),
            },
            50,
        ),
        (Error::ClaimContention(3), 11),
        (
            Error::RequestedInOtherBlock {
                ip,
                block: "10.0.0.0/26".parse().unwrap(),
                node: "n".into(),
            },
            11,
        ),
        (
            Error::RequestedTaken {
                ip,
                node: "n".into(),
                container_id: "c".into(),
            },
            11,
        ),
        (Error::RequestedExcluded(ip), 7),
        (
            Error::LeaseNotOurs {
                ip,
                attachment: "a".into(),
            },
            999,
        ),
        (host_local::Error::NotFound("c".into()).into(), 999),
        (
            Error::Several(vec![
                Error::ClaimContention(1),
                Error::RequestedExcluded(ip),
            ]),
            11,
        ),
    ];
    for (error, code) in cases {
        let cni = error.to_cni_error();
        assert_eq!(cni.code.as_u32(), code, "{error}");
        assert_eq!(cni.msg, error.to_string());
    }
}
