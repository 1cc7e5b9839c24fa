//! A TCP proxy between plegd and the test apiserver that breaks the path as a network can: it
//! swallows every byte (a black-holed path: the connections stay open, nothing gets through either
//! way, as when a control-plane node is powered off behind a load balancer) or resets every
//! connection. Hand-written because neither kube-apiserver nor the test apiserver can be told to
//! do either on demand. TLS passes through it unchanged.
//!
//! A connection that was swallowed stays swallowed when the path comes back (its bytes are lost,
//! as a load balancer that lost the connection's state drops the rest): only new connections get
//! through again.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the path does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Bytes go through.
    Pass,
    /// Every byte of every connection, open or new, is read and dropped.
    Swallow,
    /// Every connection, open or new, is reset.
    Reset,
}

pub struct Proxy {
    pub port: u16,
    path: Arc<watch::Sender<Path>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy on a free loopback port to `127.0.0.1:target`, passing bytes.
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let (path, _) = watch::channel(Path::Pass);
        let path = Arc::new(path);
        let accepting = path.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let path = accepting.subscribe();
                tokio::spawn(connection(client, target, path));
            }
        });
        Self { port, path, task }
    }

    pub fn set(&self, path: Path) {
        self.path.send_replace(path);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

async fn connection(mut client: TcpStream, target: u16, mut path: watch::Receiver<Path>) {
    let mut swallowed = false;
    let mut server = None;
    let mut from_client = vec![0u8; 64 * 1024];
    let mut from_server = vec![0u8; 64 * 1024];
    loop {
        let now = *path.borrow_and_update();
        match now {
            Path::Reset => {
                reset(&client);
                if let Some(server) = &server {
                    reset(server);
                }
                return;
            }
            Path::Swallow => swallowed = true,
            Path::Pass => {}
        }
        if server.is_none() && !swallowed {
            match TcpStream::connect(("127.0.0.1", target)).await {
                Ok(s) => server = Some(s),
                Err(_) => {
                    reset(&client);
                    return;
                }
            }
        }
        // Swallowed from the start: no server connection at all.
        let Some(upstream) = server.as_mut() else {
            tokio::select! {
                read = client.read(&mut from_client) => if matches!(read, Ok(0) | Err(_)) { return },
                changed = path.changed() => if changed.is_err() { return },
            }
            continue;
        };
        tokio::select! {
            read = client.read(&mut from_client) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) if !swallowed => if upstream.write_all(&from_client[..n]).await.is_err() { return },
                Ok(_) => {}
            },
            read = upstream.read(&mut from_server) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) if !swallowed => if client.write_all(&from_server[..n]).await.is_err() { return },
                Ok(_) => {}
            },
            changed = path.changed() => if changed.is_err() { return },
        }
    }
}
