//! TLS for client connections (rustls with the `ring` provider), configured by Redis's `tls-*`
//! directives.
//!
//! [`server_config`] turns the directives into a `rustls::ServerConfig`; the server builds it
//! at startup (a bad file stops the server, naming the file and the reason) and again when
//! `CONFIG SET` changes a `tls-*` directive (a bad file fails the `CONFIG SET` and the old
//! settings stay). New connections on `tls-port` use whatever configuration is current.
//!
//! What maps where:
//! - `tls-cert-file`, `tls-key-file` (PEM; PKCS#8, PKCS#1 or SEC1 keys; an encrypted PKCS#8 key
//!   with `tls-key-file-pass`), `tls-ca-cert-file` / `tls-ca-cert-dir` (every PEM certificate in
//!   the files of the directory).
//! - `tls-auth-clients yes|no|optional`: a client certificate signed by the CA is required,
//!   not asked for, or verified only when offered.
//! - `tls-protocols`: `TLSv1.2` and/or `TLSv1.3` (rustls has nothing older; asking for
//!   `TLSv1`/`TLSv1.1` is an error). `tls-ciphersuites` (TLS 1.3 names) and `tls-ciphers` (OpenSSL
//!   names of TLS 1.2 suites, `DEFAULT`/`HIGH`/`ALL`, `!exclusions`) select among rustls's suites;
//!   a name rustls does not offer is an error. `tls-prefer-server-ciphers yes`: the server's
//!   order decides.
//! - `tls-session-caching`, `tls-session-cache-size`, `tls-session-cache-timeout`: a server-side
//!   session cache (TLS 1.2 session IDs, TLS 1.3 stateful tickets) of that many entries, each
//!   valid that many seconds.
//! - `tls-dh-params-file`: rustls offers only ECDHE key exchange, so DH parameters have no use;
//!   the file is still checked to be readable and a note is logged.
//! - `tls-replication`, `tls-client-cert-file`, `tls-client-key-file(-pass)`: for outgoing
//!   links (replication); the files are checked the same way.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::crypto::ring as provider;
use rustls::server::{StoresServerSessions, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::config::Config;

/// The directives that change the TLS configuration (a `CONFIG SET` of one rebuilds it).
pub const DIRECTIVES: &[&str] = &[
    "tls-auth-clients",
    "tls-ca-cert-dir",
    "tls-ca-cert-file",
    "tls-cert-file",
    "tls-ciphers",
    "tls-ciphersuites",
    "tls-client-cert-file",
    "tls-client-key-file",
    "tls-client-key-file-pass",
    "tls-dh-params-file",
    "tls-key-file",
    "tls-key-file-pass",
    "tls-prefer-server-ciphers",
    "tls-protocols",
    "tls-replication",
    "tls-session-cache-size",
    "tls-session-cache-timeout",
    "tls-session-caching",
];

/// True if the configuration asks for TLS anywhere (a TLS port or TLS replication links).
pub fn wanted(cfg: &Config) -> bool {
    cfg.get("tls-port").is_some_and(|p| p != "0") || cfg.get("tls-replication") == Some("yes")
}

fn setting<'a>(cfg: &'a Config, name: &str) -> &'a str {
    cfg.get(name).unwrap_or_default()
}

/// Builds the server-side TLS configuration from `cfg`. The error names the directive or file
/// and says what is wrong.
pub fn server_config(cfg: &Config) -> Result<Arc<ServerConfig>, String> {
    let cert_file = setting(cfg, "tls-cert-file");
    let key_file = setting(cfg, "tls-key-file");
    if cert_file.is_empty() {
        return Err("No tls-cert-file configured".into());
    }
    if key_file.is_empty() {
        return Err("No tls-key-file configured".into());
    }
    let certs = load_certs(cert_file)?;
    let key = load_key(key_file, setting(cfg, "tls-key-file-pass"))?;
    let auth = setting(cfg, "tls-auth-clients");
    let roots = load_roots(cfg)?;
    if roots.is_none() && (auth != "no" || setting(cfg, "tls-replication") == "yes") {
        return Err(
            "Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-replication or tls-auth-clients are enabled"
                .into(),
        );
    }
    // Outgoing links' client certificate, checked now so a bad file is found at startup.
    let client_cert = setting(cfg, "tls-client-cert-file");
    if !client_cert.is_empty() {
        load_certs(client_cert)?;
        let client_key = setting(cfg, "tls-client-key-file");
        if client_key.is_empty() {
            return Err("tls-client-cert-file is set but tls-client-key-file is not".into());
        }
        load_key(client_key, setting(cfg, "tls-client-key-file-pass"))?;
    }
    let dh = setting(cfg, "tls-dh-params-file");
    if !dh.is_empty() {
        std::fs::read(dh).map_err(|e| format!("Failed to load {dh}: {e}"))?;
        tracing::info!(target: "shale::tls", file = dh, "tls-dh-params-file has no effect: rustls offers only ECDHE key exchange");
    }

    let versions = protocols(setting(cfg, "tls-protocols"))?;
    let suites = cipher_suites(setting(cfg, "tls-ciphers"), setting(cfg, "tls-ciphersuites"))?;
    let provider = Arc::new(rustls::crypto::CryptoProvider { cipher_suites: suites, ..provider::default_provider() });
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls-protocols / tls-ciphers / tls-ciphersuites leave no usable cipher suite: {e}"))?;
    let builder = match (roots, auth) {
        (None, _) | (Some(_), "no") => builder.with_no_client_auth(),
        (Some(roots), mode) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider));
            let verifier = if mode == "optional" { verifier.allow_unauthenticated() } else { verifier };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| format!("tls-ca-cert-file: {e}"))?)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls-cert-file {cert_file} and tls-key-file {key_file} do not make a pair: {e}"))?;
    config.ignore_client_order = setting(cfg, "tls-prefer-server-ciphers") == "yes";
    if setting(cfg, "tls-session-caching") == "yes" {
        let size = setting(cfg, "tls-session-cache-size").parse::<usize>().unwrap_or(20480);
        let timeout = setting(cfg, "tls-session-cache-timeout").parse::<u64>().unwrap_or(300);
        config.session_storage = SessionCache::new(size, Duration::from_secs(timeout));
    } else {
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
    }
    Ok(Arc::new(config))
}

/// The TLS settings of an outgoing replication link (`tls-replication yes`): the primary is
/// verified against `tls-ca-cert-file`/`-dir`; the client certificate is
/// `tls-client-cert-file`/`-key-file`, else `tls-cert-file`/`-key-file` (as in Redis).
pub fn client_config(cfg: &Config) -> Result<Arc<rustls::ClientConfig>, String> {
    let roots = load_roots(cfg)?.ok_or("tls-replication needs tls-ca-cert-file or tls-ca-cert-dir")?;
    let versions = protocols(setting(cfg, "tls-protocols"))?;
    let provider = Arc::new(provider::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls-protocols: {e}"))?
        .with_root_certificates(roots);
    let (cert, key, pass) = match setting(cfg, "tls-client-cert-file") {
        "" => (setting(cfg, "tls-cert-file"), setting(cfg, "tls-key-file"), setting(cfg, "tls-key-file-pass")),
        cert => (cert, setting(cfg, "tls-client-key-file"), setting(cfg, "tls-client-key-file-pass")),
    };
    let config = if cert.is_empty() || key.is_empty() {
        builder.with_no_client_auth()
    } else {
        builder
            .with_client_auth_cert(load_certs(cert)?, load_key(key, pass)?)
            .map_err(|e| format!("client certificate {cert} and key {key} do not make a pair: {e}"))?
    };
    Ok(Arc::new(config))
}

/// Every certificate in a PEM file (at least one).
fn load_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("Failed to load certificate: {path}: {e}"))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("Failed to load certificate: {path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("Failed to load certificate: {path}: no PEM certificate in the file"));
    }
    Ok(certs)
}

/// The private key in a PEM file; an encrypted PKCS#8 key is decrypted with `pass`.
fn load_key(path: &str, pass: &str) -> Result<PrivateKeyDer<'static>, String> {
    let fail = |why: String| format!("Failed to load private key: {path}: {why}");
    let pem = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    let text = String::from_utf8_lossy(&pem);
    if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        if pass.is_empty() {
            return Err(fail("the key is encrypted and no password is configured (tls-key-file-pass)".into()));
        }
        let (_, doc) = pkcs8::Document::from_pem(text.trim()).map_err(|e| fail(e.to_string()))?;
        let info = pkcs8::EncryptedPrivateKeyInfo::try_from(doc.as_bytes()).map_err(|e| fail(e.to_string()))?;
        let plain = info.decrypt(pass).map_err(|_| fail("wrong password or unsupported encryption".into()))?;
        return Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(plain.as_bytes().to_vec())));
    }
    if text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(fail(
            "legacy PEM encryption is not supported; convert it with `openssl pkcs8 -topk8 -v2 aes-256-cbc`".into(),
        ));
    }
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| fail(e.to_string()))
}

/// The CA certificates clients are verified against (None: none configured).
fn load_roots(cfg: &Config) -> Result<Option<RootCertStore>, String> {
    let file = setting(cfg, "tls-ca-cert-file");
    let dir = setting(cfg, "tls-ca-cert-dir");
    if file.is_empty() && dir.is_empty() {
        return Ok(None);
    }
    let mut roots = RootCertStore::empty();
    let mut add = |certs: Vec<CertificateDer<'static>>, from: &str| -> Result<(), String> {
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("Failed to configure CA certificate(s) file/directory: {from}: {e}"))?;
        }
        Ok(())
    };
    if !file.is_empty() {
        add(load_certs(file)?, file)?;
    }
    if !dir.is_empty() {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| format!("Failed to configure CA certificate(s) file/directory: {dir}: {e}"))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_file() {
                let pem = std::fs::read(&path).unwrap_or_default();
                let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok).collect();
                add(certs, &path.display().to_string())?;
            }
        }
    }
    if roots.is_empty() {
        return Err(format!(
            "Failed to configure CA certificate(s) file/directory: no certificate found in {file}{dir}"
        ));
    }
    Ok(Some(roots))
}

/// `tls-protocols`: "" (both) or a space-separated list of `TLSv1.2` / `TLSv1.3`.
fn protocols(text: &str) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    if text.trim().is_empty() {
        return Ok(vec![&rustls::version::TLS12, &rustls::version::TLS13]);
    }
    let mut out = Vec::new();
    for word in text.split_whitespace() {
        let v = match word.to_ascii_lowercase().as_str() {
            "tlsv1.2" => &rustls::version::TLS12,
            "tlsv1.3" => &rustls::version::TLS13,
            "tlsv1" | "tlsv1.1" => {
                return Err(format!(
                    "Invalid tls-protocols: {word} is not supported (rustls offers TLSv1.2 and TLSv1.3)"
                ))
            }
            _ => {
                return Err(format!(
                    "Invalid tls-protocols specified: '{word}'. Use a combination of 'TLSv1.2' and 'TLSv1.3'."
                ))
            }
        };
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

/// The OpenSSL name of each TLS 1.2 suite rustls offers.
const TLS12_NAMES: &[(&str, SupportedCipherSuite)] = &[
    ("ECDHE-ECDSA-AES256-GCM-SHA384", provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
    ("ECDHE-ECDSA-AES128-GCM-SHA256", provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
    ("ECDHE-ECDSA-CHACHA20-POLY1305", provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
    ("ECDHE-RSA-AES256-GCM-SHA384", provider::cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
    ("ECDHE-RSA-AES128-GCM-SHA256", provider::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
    ("ECDHE-RSA-CHACHA20-POLY1305", provider::cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
];

/// The TLS 1.3 suites rustls offers, by their standard names.
const TLS13_NAMES: &[(&str, SupportedCipherSuite)] = &[
    ("TLS_AES_256_GCM_SHA384", provider::cipher_suite::TLS13_AES_256_GCM_SHA384),
    ("TLS_AES_128_GCM_SHA256", provider::cipher_suite::TLS13_AES_128_GCM_SHA256),
    ("TLS_CHACHA20_POLY1305_SHA256", provider::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256),
];

/// OpenSSL cipher-string classes that name nothing rustls offers: excluding them (`!aNULL`)
/// changes nothing, asking for them is an error.
const ABSENT_CLASSES: &[&str] = &[
    "anull", "enull", "null", "md5", "rc4", "des", "3des", "export", "exp", "low", "medium", "psk", "srp", "dss",
    "camellia", "seed", "idea", "adh", "aecdh", "sha1", "cbc", "dhe", "edh", "kdhe", "kedh", "ccm", "aria",
];

/// The TLS 1.2 suites `ciphers` selects (OpenSSL syntax) followed by the TLS 1.3 suites
/// `ciphersuites` selects; each empty means all of that version, in rustls's order.
fn cipher_suites(ciphers: &str, ciphersuites: &str) -> Result<Vec<SupportedCipherSuite>, String> {
    let all12: Vec<_> = TLS12_NAMES.iter().map(|(_, s)| *s).collect();
    let mut tls12 = Vec::new();
    let mut excluded = Vec::new();
    let items: Vec<&str> = ciphers.split([':', ',', ' ']).filter(|w| !w.is_empty()).collect();
    if items.is_empty() {
        tls12 = all12.clone();
    }
    for item in items {
        let (negate, name) = match item.strip_prefix(['!', '-']) {
            Some(rest) => (true, rest),
            None => (false, item.strip_prefix('+').unwrap_or(item)),
        };
        let upper = name.to_ascii_uppercase();
        let named = TLS12_NAMES.iter().find(|(n, _)| *n == upper).map(|(_, s)| vec![*s]);
        let chosen = match (named, upper.as_str()) {
            (Some(s), _) => s,
            (None, "DEFAULT" | "HIGH" | "ALL" | "ECDHE" | "EECDH" | "AESGCM" | "AES" | "TLSV1.2") => all12.clone(),
            (None, "CHACHA20") => {
                all12.iter().copied().filter(|s| format!("{:?}", s.suite()).contains("CHACHA")).collect()
            }
            (None, _) if negate && ABSENT_CLASSES.contains(&name.to_ascii_lowercase().as_str()) => Vec::new(),
            _ => return Err(format!("Failed to configure ciphers: '{item}' is not a TLS 1.2 cipher rustls offers")),
        };
        if negate {
            excluded.extend(chosen);
        } else {
            for s in chosen {
                if !tls12.iter().any(|t: &SupportedCipherSuite| t.suite() == s.suite()) {
                    tls12.push(s);
                }
            }
        }
    }
    tls12.retain(|s| !excluded.iter().any(|e: &SupportedCipherSuite| e.suite() == s.suite()));
    let mut tls13 = Vec::new();
    let names: Vec<&str> = ciphersuites.split(':').filter(|w| !w.is_empty()).collect();
    if names.is_empty() {
        tls13 = TLS13_NAMES.iter().map(|(_, s)| *s).collect();
    }
    for name in names {
        let Some((_, s)) = TLS13_NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) else {
            return Err(format!("Failed to configure ciphersuites: '{name}' is not a TLS 1.3 suite rustls offers"));
        };
        tls13.push(*s);
    }
    Ok(tls13.into_iter().chain(tls12).collect())
}

/// Sessions by id (value, stored at), and the ids oldest first.
type Sessions = (HashMap<Vec<u8>, (Vec<u8>, Instant)>, VecDeque<Vec<u8>>);

/// The server-side session cache: at most `size` sessions, each valid for `timeout`, the
/// oldest dropped first.
struct SessionCache {
    size: usize,
    timeout: Duration,
    inner: Mutex<Sessions>,
}

impl std::fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCache").field("size", &self.size).field("timeout", &self.timeout).finish()
    }
}

impl SessionCache {
    fn new(size: usize, timeout: Duration) -> Arc<Self> {
        Arc::new(SessionCache { size: size.max(1), timeout, inner: Mutex::new((HashMap::new(), VecDeque::new())) })
    }

    fn fresh(&self, at: Instant) -> bool {
        at.elapsed() < self.timeout
    }
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *guard;
        if map.insert(key.clone(), (value, Instant::now())).is_none() {
            order.push_back(key);
        }
        while map.len() > self.size {
            let Some(oldest) = order.pop_front() else { break };
            map.remove(&oldest);
        }
        // Forget keys already taken or replaced so `order` stays bounded too.
        if order.len() > 2 * self.size {
            order.retain(|k| map.contains_key(k));
        }
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        guard.0.get(key).filter(|(_, at)| self.fresh(*at)).map(|(v, _)| v.clone())
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        guard.0.remove(key).filter(|(_, at)| self.fresh(*at)).map(|(v, _)| v)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_and_suites_map_onto_rustls() {
        assert_eq!(protocols("").unwrap().len(), 2);
        assert_eq!(protocols("TLSv1.3").unwrap().len(), 1);
        assert!(protocols("TLSv1.1 TLSv1.2").unwrap_err().contains("TLSv1.1"));
        assert!(protocols("SSLv3").is_err());
        assert_eq!(cipher_suites("", "").unwrap().len(), 9);
        let only = cipher_suites("ECDHE-RSA-AES128-GCM-SHA256", "TLS_AES_256_GCM_SHA384").unwrap();
        assert_eq!(only.len(), 2);
        let high = cipher_suites("HIGH:!aNULL:!MD5:!ECDHE-RSA-CHACHA20-POLY1305", "").unwrap();
        assert_eq!(high.len(), 3 + 5);
        assert!(cipher_suites("AES128-SHA", "").unwrap_err().contains("AES128-SHA"));
        assert!(cipher_suites("", "TLS_AES_128_CCM_SHA256").unwrap_err().contains("CCM"));
    }

    #[test]
    fn session_cache_honours_size_and_timeout() {
        let cache = SessionCache::new(2, Duration::from_secs(60));
        for k in 0u8..3 {
            cache.put(vec![k], vec![k]);
        }
        assert_eq!(cache.get(&[0]), None, "the oldest is dropped past the size");
        assert_eq!(cache.get(&[2]), Some(vec![2]));
        assert_eq!(cache.take(&[1]), Some(vec![1]));
        assert_eq!(cache.get(&[1]), None);
        let expired = SessionCache::new(8, Duration::ZERO);
        expired.put(vec![1], vec![1]);
        assert_eq!(expired.get(&[1]), None, "past the timeout a session is not resumed");
    }
}
