//! The site's CA (`http.chain_ca`) for every HTTPS request shardboot makes: the check
//! before a boot script chains a URL (`http::chain_check`), the member probes
//! (`owner::health`) and the timeline and board asks (`timeline::peers`). With
//! `boot.ipxe_tls` every member and conductor URL is `https://` with a certificate the
//! site's CA signed, so a client without it could reach none of them.
//!
//! Installed once at start-up, before any client is built; `http` settings need a
//! restart, so it never changes while running. Without it, clients trust the public
//! roots only, as before.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static ROOTS: OnceLock<Vec<reqwest::Certificate>> = OnceLock::new();

/// The CA file of `http.chain_ca` cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("http.chain_ca {path}: {reason}")]
pub struct SiteCaError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub reason: String,
}

/// Reads the PEM certificates in `path`; at least one.
pub fn load(path: &Path) -> Result<Vec<reqwest::Certificate>, SiteCaError> {
    let err = |reason: String| SiteCaError {
        path: path.to_path_buf(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate in the file".into()));
    }
    Ok(certs)
}

/// Makes `path`'s certificates trusted by every client built after this call (the
/// first call wins; later ones are ignored).
pub fn install(path: &Path) -> Result<(), SiteCaError> {
    let certs = load(path)?;
    let _ = ROOTS.set(certs);
    Ok(())
}

/// A client builder that trusts the site's CA, when one is installed, beside the
/// public roots.
pub fn client_builder() -> reqwest::ClientBuilder {
    ROOTS
        .get()
        .into_iter()
        .flatten()
        .cloned()
        .fold(reqwest::Client::builder(), |b, c| b.add_root_certificate(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_a_certificate_is_refused_naming_the_key_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("ca.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = load(&empty).unwrap_err().to_string();
        assert!(
            e.starts_with("http.chain_ca ") && e.contains("ca.pem"),
            "{e}"
        );
        assert!(e.contains("no PEM certificate"), "{e}");
        let e = load(&dir.path().join("missing.pem"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.pem"), "{e}");
    }

    #[test]
    fn a_ca_made_here_loads() {
        let ca = rcgen::generate_simple_self_signed(vec!["ca.test".into()]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, ca.cert.pem()).unwrap();
        assert_eq!(load(&path).unwrap().len(), 1);
    }
}
