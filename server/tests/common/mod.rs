//! Starting a real `shale-server` process on a free loopback port for a test.

#![allow(dead_code)] // each test file uses part of this

pub mod sync;

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
        Server::start_on(dir, file, Some(old.port), extra)
    }

    /// Kills the server with SIGKILL (no shutdown at all) and starts it again on the same
    /// directory and port.
    pub fn crash_restart(self, extra: &[&str]) -> Server {
        let mut old = self;
        let _ = old.child.kill();
        let _ = old.child.wait();
        let dir = std::mem::replace(&mut old.dir, tempfile::tempdir().unwrap());
        let file = dir.path().join("shale.conf");
        let file = file.exists().then_some(file);
        Server::start_on(dir, file, Some(old.port), extra)
    }

    pub fn start_in(dir: tempfile::TempDir, file: Option<std::path::PathBuf>, extra: &[&str]) -> Server {
        Server::start_on(dir, file, None, extra)
    }

    /// Starts the server on `port` (or a free one), retrying on another free port if a parallel
    /// test grabbed the same one first: the server answering must be our child process.
    fn start_on(
        mut dir: tempfile::TempDir,
        file: Option<std::path::PathBuf>,
        port: Option<u16>,
        extra: &[&str],
    ) -> Server {
        let password = extra.windows(2).find(|w| w[0] == "--requirepass").map(|w| w[1].to_string());
        for _ in 0..5 {
            let port = port.unwrap_or_else(free_port);
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
            let mut server = Server { child, port, dir };
            if server.wait_until_ours(password.as_deref()) {
                return server;
            }
            let _ = server.child.kill();
            let _ = server.child.wait();
            dir = std::mem::replace(&mut server.dir, tempfile::tempdir().unwrap());
        }
        panic!("could not start shale-server on a free port");
    }

    /// Waits until the port answers and the process answering is this server's child.
    fn wait_until_ours(&mut self, password: Option<&str>) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.child.try_wait().unwrap().is_some() {
                return false; // it exited (e.g. the port was taken)
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut req = Vec::new();
                if let Some(p) = password {
                    req.extend_from_slice(format!("AUTH {p}\r\n").as_bytes());
                }
                req.extend_from_slice(b"INFO server\r\n");
                // A reset here is a server (ours, still starting, or another test's) going away:
                // look again.
                if s.write_all(&req).is_err() {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                let mut reply = Vec::new();
                let mut buf = [0u8; 4096];
                while reply.len() < 350 {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => reply.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = String::from_utf8_lossy(&reply);
                if reply.is_empty() {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                return reply.contains(&format!("process_id:{}\r\n", self.child.id()));
            }
            assert!(Instant::now() < deadline, "server did not start listening on {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
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

/// A real redis-server (Debian's) for side-by-side tests; killed when dropped.
pub struct RedisServer(pub Child);

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts redis-server on a free loopback port without persistence, with `extra` options.
/// `None` (after saying so) when it is not installed, unless `SHALE_REQUIRE_REDIS_TOOLS=1`.
pub fn start_redis_with(extra: &[&str]) -> Option<(RedisServer, redis::Connection, u16)> {
    let port = free_port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let child = match child {
        Ok(c) => RedisServer(c),
        Err(_) => {
            if std::env::var("SHALE_REQUIRE_REDIS_TOOLS").is_ok_and(|v| v == "1") {
                panic!("redis-server is required (apt-get install -y redis-server)");
            }
            eprintln!("skipping: redis-server is not installed (apt-get install -y redis-server)");
            return None;
        }
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(c) = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection() {
            return Some((child, c, port));
        }
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`start_redis_with`] without extra options.
pub fn start_redis() -> Option<(RedisServer, redis::Connection, u16)> {
    start_redis_with(&[])
}

/// True if Debian's redis tool `name` (redis-cli, redis-benchmark) is installed. When it is
/// not, the caller skips that part (after this says so), unless `SHALE_REQUIRE_REDIS_TOOLS=1`
/// (as in CI) makes it a failure.
pub fn have_tool(name: &str) -> bool {
    if Command::new(name).arg("--version").output().is_ok() {
        return true;
    }
    if std::env::var("SHALE_REQUIRE_REDIS_TOOLS").is_ok_and(|v| v == "1") {
        panic!("{name} is required (apt-get install -y redis-tools)");
    }
    eprintln!("skipping: {name} is not installed (apt-get install -y redis-tools)");
    false
}

/// A python3 that imports redis-py: the one on `PATH`, else the system's (where Debian's
/// `python3-redis` installs it, when `PATH` leads to another, e.g. pyenv's). As [`have_tool`],
/// `None` skips the test, and under `SHALE_REQUIRE_REDIS_TOOLS=1` is a failure.
pub fn python_with_redis() -> Option<&'static str> {
    let imports =
        |python: &str| Command::new(python).args(["-c", "import redis"]).output().is_ok_and(|o| o.status.success());
    if let Some(python) = ["python3", "/usr/bin/python3"].into_iter().find(|p| imports(p)) {
        return Some(python);
    }
    if std::env::var("SHALE_REQUIRE_REDIS_TOOLS").is_ok_and(|v| v == "1") {
        panic!("python3 with redis-py is required (apt-get install -y python3-redis)");
    }
    eprintln!("skipping: python3 with redis-py is not installed (apt-get install -y python3-redis)");
    None
}

/// Runs shale-server with `args`, which must make it refuse to start (exit status 1); returns
/// what it logged.
pub fn refused_start(args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shale-server"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A server that starts after all is stopped, not waited on forever.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} should stop the server, but it kept running");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{args:?} should stop the server: {status:?}, {stderr}");
    stderr
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
