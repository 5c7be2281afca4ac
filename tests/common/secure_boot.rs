//! UEFI Secure Boot for the QEMU tests: a signing key made in the test, an OVMF variable
//! store whose `db` holds that key alone, and boot files signed with it (`sbsign`),
//! left unsigned, or tampered with after signing.
//!
//! Debian's `OVMF_VARS_4M.snakeoil.fd` has Secure Boot on and its snakeoil certificate
//! in PK, KEK and db ([`variables`] reads that; a test checks it). Its private key ships
//! in the same package, so anything signed with it proves little: the tests put their
//! own key in `db` instead. Writing `db` through the firmware needs an authenticated
//! write signed by a KEK (efitools' `sign-efi-sig-list`) and a program running in the
//! VM to hand it over; the variable store is a file before the VM starts, so the tests
//! write the new `db` into it directly, as `virt-fw-vars` does, and the firmware reads
//! it as its own at start.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Command;

use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::CertificateDer;

/// Debian's variable store template with Secure Boot on (package `ovmf`).
pub(crate) const SNAKEOIL_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd";
/// The certificate of its snakeoil key.
pub(crate) const SNAKEOIL_CERT: &str = "/usr/share/ovmf/PkKek-1-snakeoil.pem";

/// EFI_GLOBAL_VARIABLE (8be4df61-93ca-11d2-aa0d-00e098032b8c): PK and KEK live here.
pub(crate) const GLOBAL_VARIABLE: [u8; 16] = guid(
    0x8be4df61,
    0x93ca,
    0x11d2,
    [0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c],
);
/// EFI_IMAGE_SECURITY_DATABASE_GUID (d719b2cb-3d3a-4596-a3bc-dad00e67656f): db and
/// dbx (UEFI 2.10 §32.6.1).
pub(crate) const IMAGE_SECURITY_DATABASE: [u8; 16] = guid(
    0xd719b2cb,
    0x3d3a,
    0x4596,
    [0xa3, 0xbc, 0xda, 0xd0, 0x0e, 0x67, 0x65, 0x6f],
);
/// gEfiAuthenticatedVariableGuid: a store of AUTHENTICATED_VARIABLE_HEADERs (edk2
/// `MdeModulePkg/Include/Guid/VariableFormat.h`), the layout OVMF's Secure Boot
/// builds use.
const AUTHENTICATED_STORE: [u8; 16] = guid(
    0xaaf32c78,
    0x947b,
    0x439a,
    [0xa1, 0x80, 0x2e, 0x14, 0x4e, 0xc3, 0x77, 0x92],
);

/// A GUID as UEFI stores it: the first three fields little-endian.
const fn guid(a: u32, b: u16, c: u16, d: [u8; 8]) -> [u8; 16] {
    let a = a.to_le_bytes();
    let b = b.to_le_bytes();
    let c = c.to_le_bytes();
    [
        a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6],
        d[7],
    ]
}

// edk2's variable states: a state is written by clearing bits, so each later state
// has fewer bits set; a variable counts while it is ADDED, also mid-deletion.
const VAR_ADDED: u8 = 0x3f;
const VAR_IN_DELETED_TRANSITION: u8 = 0xfe;
const VAR_DELETED: u8 = 0xfd;
const START_ID: u16 = 0x55aa;
/// StartId, State, Reserved, Attributes, MonotonicCount, TimeStamp, PubKeyIndex,
/// NameSize, DataSize, VendorGuid.
const HEADER_LEN: usize = 60;

/// One live variable of a store.
#[derive(Debug, Clone)]
pub(crate) struct Variable {
    /// Its name, without the terminating NUL.
    pub name: String,
    /// Its vendor GUID, as stored.
    pub vendor: [u8; 16],
    /// Where its header starts in the file.
    pub offset: usize,
    /// Where its data is in the file.
    pub data: Range<usize>,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

/// Where the variables start and where the store ends: the firmware volume header's
/// HeaderLength (offset 0x30), then a 28-octet VARIABLE_STORE_HEADER.
fn store_bounds(file: &[u8]) -> (usize, usize) {
    let store = u16_at(file, 0x30) as usize;
    assert_eq!(
        file[store..store + 16],
        AUTHENTICATED_STORE,
        "not an authenticated variable store"
    );
    let size = u32_at(file, store + 16);
    (store + 28, store + size)
}

/// Every header in the store, live or not, and where free space starts.
fn headers(file: &[u8]) -> (Vec<(usize, u8, Variable)>, usize) {
    let (mut at, end) = store_bounds(file);
    let mut out = Vec::new();
    while at + HEADER_LEN <= end && u16_at(file, at) == START_ID {
        let state = file[at + 2];
        let name_len = u32_at(file, at + 36);
        let data_len = u32_at(file, at + 40);
        let name_at = at + HEADER_LEN;
        let units: Vec<u16> = file[name_at..name_at + name_len]
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .take_while(|&u| u != 0)
            .collect();
        let data_at = name_at + name_len;
        out.push((
            at,
            state,
            Variable {
                name: String::from_utf16_lossy(&units),
                vendor: file[at + 44..at + 60].try_into().unwrap(),
                offset: at,
                data: data_at..data_at + data_len,
            },
        ));
        // Headers are 4-octet aligned (HEADER_ALIGNMENT on x86).
        at = (data_at + data_len + 3) & !3;
    }
    (out, at)
}

/// The live variables of an OVMF variable store file.
pub(crate) fn variables(file: &[u8]) -> Vec<Variable> {
    headers(file)
        .0
        .into_iter()
        .filter(|(_, state, _)| {
            *state == VAR_ADDED || *state == VAR_ADDED & VAR_IN_DELETED_TRANSITION
        })
        .map(|(_, _, v)| v)
        .collect()
}

/// The live variable `name` of `vendor`.
pub(crate) fn variable<'a>(vars: &'a [Variable], name: &str, vendor: &[u8; 16]) -> &'a Variable {
    vars.iter()
        .find(|v| v.name == name && &v.vendor == vendor)
        .unwrap_or_else(|| panic!("no variable {name} in the store"))
}

/// `file` with the live variable `name` of `vendor` replaced by one holding `data`: the
/// old header is marked deleted and a copy of it (same attributes and timestamp) with
/// the new data is appended, as the firmware's own variable driver does on a write.
pub(crate) fn replace_variable(file: &[u8], name: &str, vendor: &[u8; 16], data: &[u8]) -> Vec<u8> {
    let mut out = file.to_vec();
    let (_, end) = store_bounds(file);
    let old = variable(&variables(file), name, vendor).clone();
    let (_, free) = headers(file);
    let name16: Vec<u8> = name
        .encode_utf16()
        .chain([0])
        .flat_map(u16::to_le_bytes)
        .collect();
    let mut header = file[old.offset..old.offset + HEADER_LEN].to_vec();
    header[2] = VAR_ADDED;
    header[8..16].fill(0); // MonotonicCount
    header[32..36].fill(0); // PubKeyIndex
    header[36..40].copy_from_slice(&(name16.len() as u32).to_le_bytes());
    header[40..44].copy_from_slice(&(data.len() as u32).to_le_bytes());
    let record = [header, name16, data.to_vec()].concat();
    assert!(free + record.len() <= end, "the variable store is full");
    assert!(
        out[free..free + record.len()].iter().all(|&b| b == 0xff),
        "free space that is not erased"
    );
    out[free..free + record.len()].copy_from_slice(&record);
    out[old.offset + 2] &= VAR_DELETED & VAR_IN_DELETED_TRANSITION;
    out
}

/// The DER of the PEM certificate at `path`.
pub(crate) fn cert_der(path: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_vec()
}

/// Whether `needle` occurs in `hay`.
pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn run(command: &mut Command) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e} (tests/install-deps.sh installs it)"));
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Secure Boot signing key made for one test: an RSA-2048 key and its self-signed
/// certificate (this OVMF verifies RSA signatures), as PEM files in a directory.
pub(crate) struct SigningKey {
    /// The private key.
    pub key: PathBuf,
    /// The certificate.
    pub cert: PathBuf,
}

impl SigningKey {
    /// Makes the key in `dir`.
    pub(crate) fn new(dir: &Path) -> Self {
        let key = dir.join("db.key");
        let cert = dir.join("db.crt");
        run(Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args(["-subj", "/CN=shardboot Secure Boot test db key", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert));
        Self { key, cert }
    }

    /// Debian's snakeoil store with this key's certificate as the only entry of `db`
    /// (an EFI_SIGNATURE_LIST of one X.509 certificate, made by efitools'
    /// `cert-to-efi-sig-list`), written to `out`.
    pub(crate) fn enrolled_store(&self, out: &Path) {
        let esl = out.with_extension("esl");
        run(Command::new("cert-to-efi-sig-list")
            .args(["-g", "5b0e7a11-c0de-4b1d-8000-5ec0b0075ec0"])
            .arg(&self.cert)
            .arg(&esl));
        let template = std::fs::read(SNAKEOIL_VARS)
            .unwrap_or_else(|e| panic!("{SNAKEOIL_VARS}: {e} (package ovmf)"));
        let store = replace_variable(
            &template,
            "db",
            &IMAGE_SECURITY_DATABASE,
            &std::fs::read(&esl).unwrap(),
        );
        std::fs::write(out, store).unwrap();
    }

    /// `input` signed with this key (`sbsign`: an Authenticode signature appended to the
    /// PE image), written to `out`.
    pub(crate) fn sign(&self, input: &Path, out: &Path) {
        run(Command::new("sbsign")
            .arg("--key")
            .arg(&self.key)
            .arg("--cert")
            .arg(&self.cert)
            .arg("--output")
            .arg(out)
            .arg(input));
    }

    /// Whether `sbverify` accepts `file` as signed by this key.
    pub(crate) fn verifies(&self, file: &Path) -> bool {
        Command::new("sbverify")
            .arg("--cert")
            .arg(&self.cert)
            .arg(file)
            .output()
            .expect("sbverify (package sbsigntool)")
            .status
            .success()
    }
}
