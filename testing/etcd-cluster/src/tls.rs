//! Test certificates made with the openssl CLI: no crate for X.509 is needed
//! and the files are what etcd and any client read anyway.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::HarnessError;

const OPENSSL: &str = "/usr/bin/openssl";

/// Extensions of the server certificate: etcd's client URLs are
/// `https://127.0.0.1:PORT`, so the IP SAN is what clients check; `localhost`
/// is there for clients that dial by name.
const SERVER_EXT: &str = "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
";

const CLIENT_EXT: &str = "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
";

/// The Common Name of both client certificates. etcd with `--client-cert-auth`
/// and auth enabled takes it as the user name when no password is given; no
/// such user exists, so a certificate alone never authenticates.
pub const CLIENT_CN: &str = "cluster-ipam-test";

/// PEM files in the cluster's temp dir (EC P-256 keys in PKCS#8).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA etcd trusts for client certificates and that signed its server
    /// certificate.
    pub ca: PathBuf,
    /// A client certificate signed by `ca` (CN [`CLIENT_CN`]).
    pub cert: PathBuf,
    /// The key of `cert`.
    pub key: PathBuf,
    /// An unrelated CA: a client that trusts only it rejects etcd's server
    /// certificate.
    pub other_ca: PathBuf,
    /// A client certificate signed by `other_ca`, which etcd rejects.
    pub other_cert: PathBuf,
    /// The key of `other_cert`.
    pub other_key: PathBuf,
    /// etcd's server certificate (signed by `ca`, SANs 127.0.0.1 and localhost).
    pub server_cert: PathBuf,
    /// The key of `server_cert`.
    pub server_key: PathBuf,
}

impl TlsFiles {
    /// Writes both CAs and the certificates they sign into `dir`.
    pub(crate) fn generate(dir: &Path) -> Result<Self, HarnessError> {
        fs::create_dir_all(dir)
            .map_err(|e| HarnessError::io(format!("creating {}", dir.display()), e))?;
        let p = |name: &str| dir.join(name);
        ca(&p("ca"), "etcd-cluster test CA")?;
        leaf(&p("server"), &p("ca"), "127.0.0.1", SERVER_EXT, 1)?;
        leaf(&p("client"), &p("ca"), CLIENT_CN, CLIENT_EXT, 2)?;
        ca(&p("other-ca"), "etcd-cluster unrelated CA")?;
        leaf(&p("other-client"), &p("other-ca"), CLIENT_CN, CLIENT_EXT, 1)?;
        let crt = |name: &str| dir.join(format!("{name}.crt"));
        let key = |name: &str| dir.join(format!("{name}.key"));
        Ok(TlsFiles {
            ca: crt("ca"),
            cert: crt("client"),
            key: key("client"),
            other_ca: crt("other-ca"),
            other_cert: crt("other-client"),
            other_key: key("other-client"),
            server_cert: crt("server"),
            server_key: key("server"),
        })
    }
}

/// A self-signed CA: `<base>.key` and `<base>.crt`.
#[rustfmt::skip] // flags next to their values
fn ca(base: &Path, cn: &str) -> Result<(), HarnessError> {
    openssl(&[
        "req", "-x509", "-new", "-nodes", "-days", "3650",
        "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-subj", &format!("/CN={cn}"),
        "-keyout", &path(base, "key"), "-out", &path(base, "crt"),
    ])
}

/// A key and a certificate for `cn` signed by the CA at `ca_base`, with the
/// extensions `ext`; `serial` must be unique per CA.
#[rustfmt::skip] // flags next to their values
fn leaf(base: &Path, ca_base: &Path, cn: &str, ext: &str, serial: u32) -> Result<(), HarnessError> {
    let ext_file = path(base, "ext");
    fs::write(&ext_file, ext).map_err(|e| HarnessError::io(format!("writing {ext_file}"), e))?;
    openssl(&[
        "req", "-new", "-nodes",
        "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-subj", &format!("/CN={cn}"),
        "-keyout", &path(base, "key"), "-out", &path(base, "csr"),
    ])?;
    openssl(&[
        "x509", "-req", "-days", "3650", "-set_serial", &serial.to_string(),
        "-in", &path(base, "csr"), "-extfile", &ext_file,
        "-CA", &path(ca_base, "crt"), "-CAkey", &path(ca_base, "key"),
        "-out", &path(base, "crt"),
    ])
}

fn path(base: &Path, ext: &str) -> String {
    base.with_extension(ext).display().to_string()
}

fn openssl(args: &[&str]) -> Result<(), HarnessError> {
    let cmd = format!("{OPENSSL} {}", args.join(" "));
    let out = Command::new(OPENSSL)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| HarnessError::io(format!("running {cmd}"), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(HarnessError::Command {
            cmd,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}
