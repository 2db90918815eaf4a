//! Starting a real `shale-server` process on a free loopback port for a test.

#![allow(dead_code)] // each test file uses part of this

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server; killed when dropped.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// Starts the server with `extra` directives and waits until it accepts connections.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_in(tempfile::tempdir().unwrap(), None, extra)
    }

    /// Starts the server with a configuration file holding `config` (then `extra` options).
    pub fn start_with_config(config: &str, extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("shale.conf");
        std::fs::write(&file, config).unwrap();
        Server::start_in(dir, Some(file), extra)
    }

    /// Starts the server again on the same directory (and config file, if any) and port.
    pub fn restart(self, extra: &[&str]) -> Server {
        let mut old = self;
        let status = old.terminate();
        assert!(status.success(), "clean exit before restart: {status}");
        let dir = std::mem::replace(&mut old.dir, tempfile::tempdir().unwrap());
        let file = dir.path().join("shale.conf");
        let file = file.exists().then_some(file);
        Server::start_on(dir, file, old.port, extra)
    }

    pub fn start_in(dir: tempfile::TempDir, file: Option<std::path::PathBuf>, extra: &[&str]) -> Server {
        Server::start_on(dir, file, free_port(), extra)
    }

    fn start_on(dir: tempfile::TempDir, file: Option<std::path::PathBuf>, port: u16, extra: &[&str]) -> Server {
        let mut args: Vec<String> = file.iter().map(|f| f.display().to_string()).collect();
        args.extend([
            "--port".to_string(),
            port.to_string(),
            "--dir".into(),
            dir.path().join("data").display().to_string(),
        ]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = Command::new(env!("CARGO_BIN_EXE_shale-server"))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = Server { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "server did not start listening on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).unwrap().get_connection().unwrap()
    }

    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        if let Some(status) = self.child.try_wait().unwrap() {
            return status;
        }
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        self.wait_exit()
    }

    /// Waits (bounded) for the process to exit by itself.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not stop after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Writes `req` and reads until `expect` bytes arrived (or the peer closed).
pub fn roundtrip(s: &mut TcpStream, req: &[u8], expect: usize) -> Vec<u8> {
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while out.len() < expect {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    out
}
