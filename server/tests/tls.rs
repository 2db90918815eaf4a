//! TLS against a real `shale-server`: certificates made at run time (a CA, a server
//! certificate, client certificates good, untrusted and expired), clients that are real: the
//! Rust `redis` crate over rustls, and `redis-cli --tls` / `redis-benchmark --tls` where
//! installed (CI installs them).

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{free_port, have_tool, refused_start, Server};
use rcgen::{
    date_time_ymd, BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// A CA that signs certificates.
struct Ca {
    cert: Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::CrlSign];
        Ca { cert: params.self_signed(&key).unwrap(), key }
    }

    /// A leaf certificate and its key, PEM: for the server (`server`) or a client.
    fn issue(&self, name: &str, server: bool, expired: bool) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let sans = if server { vec!["localhost".to_string(), "127.0.0.1".to_string()] } else { Vec::new() };
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages =
            vec![if server { ExtendedKeyUsagePurpose::ServerAuth } else { ExtendedKeyUsagePurpose::ClientAuth }];
        if expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2021, 1, 1);
        }
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// The files a test uses, in a temporary directory.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        Files { dir: tempfile::tempdir().unwrap() }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A TLS client of the `redis` crate, with a client certificate or without.
fn tls_client(port: u16, ca: &str, client: Option<&(String, String)>) -> redis::RedisResult<redis::Connection> {
    let certs = redis::TlsCertificates {
        client_tls: client.map(|(cert, key)| redis::ClientTlsConfig {
            client_cert: cert.as_bytes().to_vec(),
            client_key: key.as_bytes().to_vec(),
        }),
        root_cert: Some(ca.as_bytes().to_vec()),
    };
    let client = redis::Client::build_with_tls(format!("rediss://127.0.0.1:{port}/"), certs)?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(5))?;
    // The server checks the client's certificate after the client's side of the handshake:
    // a refusal shows on the first exchange.
    redis::cmd("PING").query::<String>(&mut conn)?;
    Ok(conn)
}

/// The directives for a server with `tls_port` and the given files.
fn tls_args<'a>(tls_port: &'a str, cert: &'a Path, key: &'a Path, ca: &'a Path) -> Vec<&'a str> {
    vec!["--tls-port", tls_port, "--tls-cert-file", s(cert), "--tls-key-file", s(key), "--tls-ca-cert-file", s(ca)]
}

#[test]
fn mutual_tls_with_real_clients() {
    let files = Files::new();
    let ca = Ca::new("Shale test CA");
    let (server_cert, server_key) = ca.issue("shale-server", true, false);
    let good = ca.issue("good client", false, false);
    let expired = ca.issue("expired client", false, true);
    let stranger = Ca::new("Another CA").issue("stranger", false, false);
    let ca_pem = ca.cert.pem();
    let (cert, key, ca_file) = (
        files.write("server.crt", &server_cert),
        files.write("server.key", &server_key),
        files.write("ca.crt", &ca_pem),
    );
    let tls_port = free_port().to_string();
    let server = Server::start(&tls_args(&tls_port, &cert, &key, &ca_file));
    let port: u16 = tls_port.parse().unwrap();

    // A client with a certificate the CA signed: works, and sees what plaintext clients write.
    let mut conn = tls_client(port, &ca_pem, Some(&good)).expect("a trusted client certificate is accepted");
    redis::cmd("SET").arg("k").arg("over tls").exec(&mut conn).unwrap();
    let mut plain = server.client();
    assert_eq!(redis::cmd("GET").arg("k").query::<String>(&mut plain).unwrap(), "over tls");
    let big = vec![b'x'; 3 << 20];
    redis::cmd("SET").arg("big").arg(&big).exec(&mut conn).unwrap();
    assert_eq!(
        redis::cmd("GET").arg("big").query::<Vec<u8>>(&mut conn).unwrap(),
        big,
        "a 3 MB value crosses TLS whole"
    );

    // Refused: no certificate, one from another CA, an expired one.
    assert!(tls_client(port, &ca_pem, None).is_err(), "tls-auth-clients yes requires a certificate");
    assert!(tls_client(port, &ca_pem, Some(&stranger)).is_err(), "an untrusted certificate is refused");
    assert!(tls_client(port, &ca_pem, Some(&expired)).is_err(), "an expired certificate is refused");

    // A plaintext client on the TLS port is closed without an answer.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    raw.write_all(b"PING\r\n").unwrap();
    let mut buf = [0u8; 64];
    let n = raw.read(&mut buf).unwrap_or(0);
    assert!(!String::from_utf8_lossy(&buf[..n]).contains("PONG"), "no reply to plaintext on the TLS port");

    // optional: a client without a certificate is let in, one with a bad certificate is not.
    redis::cmd("CONFIG").arg("SET").arg("tls-auth-clients").arg("optional").exec(&mut plain).unwrap();
    tls_client(port, &ca_pem, None).expect("optional lets a client without a certificate in");
    assert!(tls_client(port, &ca_pem, Some(&stranger)).is_err());
    redis::cmd("CONFIG").arg("SET").arg("tls-auth-clients").arg("no").exec(&mut plain).unwrap();
    tls_client(port, &ca_pem, None).expect("no client certificate asked for");

    // Real tools.
    if have_tool("redis-cli") {
        let (good_cert, good_key) = (files.write("client.crt", &good.0), files.write("client.key", &good.1));
        redis::cmd("CONFIG").arg("SET").arg("tls-auth-clients").arg("yes").exec(&mut plain).unwrap();
        let out = Command::new("redis-cli")
            .args(["--tls", "--cacert", s(&ca_file), "--cert", s(&good_cert), "--key", s(&good_key)])
            .args(["-p", &tls_port, "GET", "k"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "over tls\n", "{out:?}");
        let out = Command::new("redis-cli")
            .args(["--tls", "--cacert", s(&ca_file), "-p", &tls_port, "GET", "k"])
            .output()
            .unwrap();
        assert!(!String::from_utf8_lossy(&out.stdout).contains("over tls"), "redis-cli without a certificate: {out:?}");
        if have_tool("redis-benchmark") {
            let out = Command::new("redis-benchmark")
                .args(["--tls", "--cacert", s(&ca_file), "--cert", s(&good_cert), "--key", s(&good_key)])
                .args(["-p", &tls_port, "-n", "2000", "-c", "4", "-t", "set,get", "-q"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && text.contains("SET") && text.contains("GET"), "{out:?}");
        }
    }
}

#[test]
fn certificates_reload_and_bad_files_are_named() {
    let files = Files::new();
    let ca = Ca::new("First CA");
    let (c1, k1) = ca.issue("shale-server", true, false);
    let ca_pem = ca.cert.pem();
    let (cert, key, ca_file) =
        (files.write("s1.crt", &c1), files.write("s1.key", &k1), files.write("ca1.crt", &ca_pem));
    let tls_port = free_port().to_string();
    let mut args = tls_args(&tls_port, &cert, &key, &ca_file);
    args.extend(["--tls-auth-clients", "no"]);
    let server = Server::start(&args);
    let port: u16 = tls_port.parse().unwrap();
    tls_client(port, &ca_pem, None).expect("first certificate");

    // A certificate from a second CA, loaded with CONFIG SET: new clients trust only it.
    let ca2 = Ca::new("Second CA");
    let (c2, k2) = ca2.issue("shale-server", true, false);
    let (cert2, key2) = (files.write("s2.crt", &c2), files.write("s2.key", &k2));
    let mut plain = server.client();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("tls-cert-file")
        .arg(s(&cert2))
        .arg("tls-key-file")
        .arg(s(&key2))
        .exec(&mut plain)
        .unwrap();
    tls_client(port, &ca2.cert.pem(), None).expect("the reloaded certificate is served");
    assert!(tls_client(port, &ca_pem, None).is_err(), "the old certificate is gone");

    // A missing file: CONFIG SET fails naming it, and the settings in force stay.
    let err = redis::cmd("CONFIG")
        .arg("SET")
        .arg("tls-cert-file")
        .arg("/nonexistent/shale.crt")
        .exec(&mut plain)
        .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/shale.crt"), "{err}");
    assert_eq!(
        redis::cmd("CONFIG").arg("GET").arg("tls-cert-file").query::<Vec<String>>(&mut plain).unwrap()[1],
        s(&cert2)
    );
    tls_client(port, &ca2.cert.pem(), None).expect("still served after the failed CONFIG SET");
    let err = redis::cmd("CONFIG").arg("SET").arg("tls-protocols").arg("TLSv1.1").exec(&mut plain).unwrap_err();
    assert!(err.to_string().contains("TLSv1.1"), "{err}");
    let err = redis::cmd("CONFIG").arg("SET").arg("tls-ciphers").arg("RC4-MD5").exec(&mut plain).unwrap_err();
    assert!(err.to_string().contains("RC4-MD5"), "{err}");

    // A server started with a bad key refuses to start and says which file.
    let garbage = files.write("garbage.key", "not a key\n");
    let other_port = free_port().to_string();
    let data = files.dir.path().join("data");
    let tls = ["--port", "0", "--tls-port", &other_port, "--tls-cert-file", s(&cert), "--dir", s(&data)];
    let log = refused_start(&[&tls[..], &["--tls-key-file", s(&garbage), "--tls-auth-clients", "no"]].concat());
    assert!(log.contains("garbage.key"), "the error names the file: {log}");
    // And without a CA while client certificates are required.
    assert!(refused_start(&[&tls[..], &["--tls-key-file", s(&key)]].concat()).contains("tls-ca-cert-file"));
}

#[test]
fn encrypted_key_and_tls_only_server() {
    use pkcs8::der::pem::LineEnding;
    let files = Files::new();
    let ca = Ca::new("CA");
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "shale-server");
    let cert = params.signed_by(&key, &ca.cert, &ca.key).unwrap();
    let der = key.serialize_der();
    let info = pkcs8::PrivateKeyInfo::try_from(der.as_slice()).unwrap();
    let pbes2 = pkcs8::pkcs5::pbes2::Parameters::pbkdf2_sha256_aes256cbc(2048, &[7u8; 16], &[9u8; 16]).unwrap();
    let encrypted = info.encrypt_with_params(pbes2, "s3cret").unwrap().to_pem("ENCRYPTED PRIVATE KEY", LineEnding::LF);
    let (cert_file, key_file) = (files.write("s.crt", &cert.pem()), files.write("s.key", &encrypted.unwrap()));
    let tls_port = free_port();
    let data = files.dir.path().join("data");
    // port 0: TLS only.
    let base =
        ["--port", "0", "--tls-cert-file", s(&cert_file), "--tls-key-file", s(&key_file), "--tls-auth-clients", "no"];
    let port = tls_port.to_string();
    let wrong = [&base[..], &["--tls-port", &port, "--dir", s(&data), "--tls-key-file-pass", "wrong"]].concat();
    assert!(refused_start(&wrong).contains("s.key"), "a wrong key password stops the server, naming the key");
    let mut child = Command::new(env!("CARGO_BIN_EXE_shale-server"))
        .args(base)
        .args(["--tls-port", &tls_port.to_string(), "--dir", s(&data), "--tls-key-file-pass", "s3cret"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ca_pem = ca.cert.pem();
    let mut answered = false;
    for _ in 0..200 {
        if let Ok(mut conn) = tls_client(tls_port, &ca_pem, None) {
            redis::cmd("SET").arg("a").arg("1").exec(&mut conn).unwrap();
            answered = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(answered, "the TLS-only server with a decrypted key answers");
}

#[test]
fn replication_over_tls_with_a_client_certificate() {
    let files = Files::new();
    let ca = Ca::new("Shale test CA");
    let (server_cert, server_key) = ca.issue("shale-server", true, false);
    let (client_cert, client_key) = ca.issue("replica", false, false);
    let (cert, key, ca_file) = (
        files.write("server.crt", &server_cert),
        files.write("server.key", &server_key),
        files.write("ca.crt", &ca.cert.pem()),
    );
    let (ccert, ckey) = (files.write("client.crt", &client_cert), files.write("client.key", &client_key));
    let primary_tls = free_port().to_string();
    let primary = Server::start(&tls_args(&primary_tls, &cert, &key, &ca_file));
    let replica_tls = free_port().to_string();
    let upstream = format!("127.0.0.1 {primary_tls}");
    let mut args = tls_args(&replica_tls, &cert, &key, &ca_file);
    args.extend(["--tls-replication", "yes", "--tls-client-cert-file", s(&ccert), "--tls-client-key-file", s(&ckey)]);
    args.extend(["--replicaof", &upstream]);
    let replica = Server::start(&args);
    let mut pc = primary.client();
    redis::cmd("SET").arg("over").arg("tls").query::<()>(&mut pc).unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut pc).unwrap();
    assert_eq!(acked, 1, "the replica connected over TLS (with its client certificate) and applied the write");
    let mut rc = replica.client();
    assert_eq!(redis::cmd("GET").arg("over").query::<String>(&mut rc).unwrap(), "tls");
}
