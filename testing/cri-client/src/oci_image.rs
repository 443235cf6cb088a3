//! The sandbox image the tests import: an OCI image layout in a tar
//! archive, written here so that nothing is pulled from a registry.
//!
//! One uncompressed layer holds busybox-static and a web root; the image's
//! entrypoint is busybox's httpd in the foreground. As the sandbox
//! ("pause") process it keeps the pod's namespaces alive like the real
//! pause does, and it answers HTTP, so a test can reach the pod on its IP
//! and through its host port.

use std::io::Write;
use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::Error;

const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";
const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// What goes into the image.
#[derive(Debug, Clone)]
pub struct SandboxImage<'a> {
    /// Full reference containerd stores it under (`io.containerd.image.name`).
    pub reference: &'a str,
    /// A statically linked busybox (Debian's busybox-static: /bin/busybox).
    pub busybox: &'a Path,
    /// The port httpd listens on inside the pod.
    pub http_port: u16,
    /// The body of `/index.html`, which a test fetches to know it reached
    /// this pod.
    pub index_html: &'a str,
}

/// Writes the OCI archive (image layout as a tar) to `archive`.
pub fn write_archive(image: &SandboxImage<'_>, archive: &Path) -> Result<(), Error> {
    let busybox = std::fs::read(image.busybox)
        .map_err(|e| Error::io(format!("read {}", image.busybox.display()), e))?;
    let layer = layer_tar(&busybox, image.index_html.as_bytes())?;
    let layer_digest = sha256(&layer);

    let config = serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": ["/bin/busybox", "httpd", "-f", "-p", image.http_port.to_string(), "-h", "/www"],
            "WorkingDir": "/",
        },
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
        "history": [{ "created_by": "cri-client oci_image::write_archive" }],
    }))
    .map_err(|source| Error::Encode {
        what: "config",
        source,
    })?;
    let config_digest = sha256(&config);

    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": { "mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": config.len() },
        "layers": [{ "mediaType": LAYER_MEDIA_TYPE, "digest": layer_digest, "size": layer.len() }],
    }))
    .map_err(|source| Error::Encode {
        what: "manifest",
        source,
    })?;
    let manifest_digest = sha256(&manifest);

    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": MANIFEST_MEDIA_TYPE,
            "digest": manifest_digest,
            "size": manifest.len(),
            "platform": { "architecture": "amd64", "os": "linux" },
            "annotations": { "io.containerd.image.name": image.reference },
        }],
    }))
    .map_err(|source| Error::Encode {
        what: "index",
        source,
    })?;

    let file = std::fs::File::create(archive)
        .map_err(|e| Error::io(format!("create {}", archive.display()), e))?;
    let mut tar = tar::Builder::new(file);
    let io = |e| Error::io(format!("write {}", archive.display()), e);
    append_file(
        &mut tar,
        "oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#,
        0o644,
    )
    .map_err(io)?;
    append_file(&mut tar, "index.json", &index, 0o644).map_err(io)?;
    for (digest, blob) in [
        (&layer_digest, &layer),
        (&config_digest, &config),
        (&manifest_digest, &manifest),
    ] {
        let name = format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
        append_file(&mut tar, &name, blob, 0o644).map_err(io)?;
    }
    tar.into_inner().and_then(|mut f| f.flush()).map_err(io)?;
    Ok(())
}

/// The root filesystem layer: `/bin/busybox`, `/www/index.html`, and the
/// empty folders runc mounts over.
fn layer_tar(busybox: &[u8], index_html: &[u8]) -> Result<Vec<u8>, Error> {
    let mut tar = tar::Builder::new(Vec::new());
    let io = |e| Error::io("build the image layer", e);
    for dir in ["bin", "www", "dev", "proc", "sys", "etc", "tmp"] {
        append_dir(&mut tar, dir).map_err(io)?;
    }
    append_file(&mut tar, "bin/busybox", busybox, 0o755).map_err(io)?;
    append_file(&mut tar, "www/index.html", index_html, 0o644).map_err(io)?;
    tar.into_inner().map_err(io)
}

fn append_file<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &str,
    data: &[u8],
    mode: u32,
) -> std::io::Result<()> {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(data.len() as u64);
    header.set_mode(mode);
    header.set_mtime(0);
    tar.append_data(&mut header, path, data)
}

fn append_dir<W: Write>(tar: &mut tar::Builder<W>, path: &str) -> std::io::Result<()> {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_size(0);
    header.set_mode(0o755);
    header.set_mtime(0);
    tar.append_data(&mut header, format!("{path}/"), std::io::empty())
}

fn sha256(data: &[u8]) -> String {
    let digest = Sha256::digest(data);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Read;

    use super::*;

    /// Reads the archive back: every blob is stored under its digest, and
    /// the index leads to a manifest whose config and layer are there.
    #[test]
    fn archive_is_a_content_addressed_image_layout() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fake_busybox = dir.path().join("busybox");
        std::fs::write(&fake_busybox, b"\x7fELF not really").expect("write");
        let archive = dir.path().join("image.tar");
        let image = SandboxImage {
            reference: "cnitest.local/sandbox:test",
            busybox: &fake_busybox,
            http_port: 8080,
            index_html: "hello\n",
        };
        write_archive(&image, &archive).expect("write archive");

        let mut files = BTreeMap::new();
        let mut tar = tar::Archive::new(std::fs::File::open(&archive).expect("open"));
        for entry in tar.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let path = entry.path().expect("path").display().to_string();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).expect("read");
            files.insert(path, data);
        }
        for (path, data) in &files {
            if let Some(hex) = path.strip_prefix("blobs/sha256/") {
                assert_eq!(sha256(data), format!("sha256:{hex}"), "{path}");
            }
        }
        let blob = |digest: &serde_json::Value| {
            let hex = digest
                .as_str()
                .expect("digest")
                .trim_start_matches("sha256:");
            files
                .get(&format!("blobs/sha256/{hex}"))
                .unwrap_or_else(|| panic!("no blob {digest}"))
        };
        let json =
            |data: &[u8]| -> serde_json::Value { serde_json::from_slice(data).expect("json") };
        assert!(files.contains_key("oci-layout"));
        let index = json(&files["index.json"]);
        let descriptor = &index["manifests"][0];
        assert_eq!(
            descriptor["annotations"]["io.containerd.image.name"],
            "cnitest.local/sandbox:test"
        );
        let manifest = json(blob(&descriptor["digest"]));
        let config = json(blob(&manifest["config"]["digest"]));
        assert_eq!(
            config["config"]["Entrypoint"],
            json!(["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/www"])
        );
        let layer_digest = &manifest["layers"][0]["digest"];
        assert_eq!(&config["rootfs"]["diff_ids"][0], layer_digest);

        let mut layer = tar::Archive::new(&blob(layer_digest)[..]);
        let mut names = Vec::new();
        for entry in layer.entries().expect("layer entries") {
            let mut entry = entry.expect("layer entry");
            let name = entry.path().expect("path").display().to_string();
            if name == "www/index.html" {
                let mut body = String::new();
                entry.read_to_string(&mut body).expect("read");
                assert_eq!(body, "hello\n");
            }
            if name == "bin/busybox" {
                assert_eq!(entry.header().mode().expect("mode"), 0o755);
            }
            names.push(name);
        }
        assert!(names.contains(&"bin/busybox".to_string()), "{names:?}");
        assert!(names.contains(&"www/index.html".to_string()), "{names:?}");
    }
}
