//! The node–keeper wire: one `SOCK_SEQPACKET` unix socket in the data dir
//! (`keeper.sock`, mode 0600), one MessagePack message per packet, a PTY
//! master travelling beside `held` and `spawned` as `SCM_RIGHTS`. The
//! version is checked at `hello`: a keeper outlives node upgrades, so a
//! new node must speak to an old keeper or say plainly that it cannot.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};

/// The wire's version; a keeper answers `refused` to any other.
pub const VERSION: u32 = 1;
/// The largest message either side sends or accepts (a `spawn` carries the
/// program's whole environment).
pub const MAX_MESSAGE: usize = 192 * 1024;

/// The keeper's socket in a data dir.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("keeper.sock")
}

/// The node to the keeper.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Request {
    /// First message of a connection: answered by `hello`, then one `held`
    /// per program the keeper holds, then `held_end`.
    Hello { version: u32 },
    /// Start `command` in a new PTY as session `id`: `spawned` (with the
    /// master) or `spawn_failed`.
    Spawn {
        id: String,
        command: Vec<String>,
        cwd: Option<PathBuf>,
        /// The program's whole environment.
        env: Vec<(Vec<u8>, Vec<u8>)>,
        cols: u16,
        rows: u16,
    },
    /// The node is done with `id`: reap it (killing its process group
    /// first if it still runs), close the keeper's master, forget it.
    Release { id: String },
}

/// The keeper to the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Reply {
    Hello {
        version: u32,
        pid: u32,
    },
    /// The other side speaks another version.
    Refused {
        reason: String,
    },
    /// A program the keeper holds (its master comes with it); `exit` is
    /// set when it ended while no node was there to be told.
    Held {
        id: String,
        pid: i32,
        exit: Option<Exit>,
    },
    HeldEnd,
    Spawned {
        id: String,
        pid: i32,
    },
    SpawnFailed {
        id: String,
        /// The keeper's (the node's) fault, not the request's.
        internal: bool,
        reason: String,
    },
    /// A program ended (its zombie waits for `release`).
    Exited {
        id: String,
        exit: Exit,
    },
}

/// How a program ended: its exit code, or 128 + the signal and the signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    pub code: u32,
    pub signal: Option<i32>,
}

/// Sends one message, with `fd` beside it when given.
pub fn send<T: Serialize>(
    socket: impl AsFd,
    msg: &T,
    fd: Option<std::os::fd::BorrowedFd<'_>>,
) -> std::io::Result<()> {
    let bytes = rmp_serde::to_vec_named(msg).map_err(std::io::Error::other)?;
    if bytes.len() > MAX_MESSAGE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "a keeper message of {} bytes (at most {MAX_MESSAGE}): the environment is too large",
                bytes.len()
            ),
        ));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds;
    if let Some(fd) = fd {
        fds = [fd];
        control.push(SendAncillaryMessage::ScmRights(&fds));
    }
    loop {
        match rustix::net::sendmsg(
            &socket,
            &[IoSlice::new(&bytes)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(_) => return Ok(()),
        }
    }
}

/// Receives one message and the descriptor beside it (`None` at the end
/// of the connection).
pub fn recv<T: for<'de> Deserialize<'de>>(
    socket: impl AsFd,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<(T, Option<OwnedFd>)>> {
    buf.resize(MAX_MESSAGE, 0);
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            &socket,
            &mut [IoSliceMut::new(buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            result => break result?,
        }
    };
    let mut fd = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            // More than one descriptor is a peer's bug: the rest close.
            for received in fds {
                fd.get_or_insert(received);
            }
        }
    }
    if got.bytes == 0 {
        return Ok(None);
    }
    if got.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
        // The descriptor did not fit (the open-file limit): the caller
        // sees a message without its terminal.
        tracing::warn!("a keeper message lost its descriptor (open-file limit?)");
    }
    if got.flags.contains(rustix::net::ReturnFlags::TRUNC) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a keeper message over {MAX_MESSAGE} bytes"),
        ));
    }
    let msg = rmp_serde::from_slice(&buf[..got.bytes])
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok(Some((msg, fd)))
}

/// A seqpacket unix socket, close-on-exec.
pub fn seqpacket() -> std::io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?)
}

/// A unix socket address for `path` (at most 107 bytes).
pub fn address(path: &Path) -> std::io::Result<rustix::net::SocketAddrUnix> {
    rustix::net::SocketAddrUnix::new(path).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{}: too long for a unix socket (at most 107 bytes): use a shorter data dir",
                path.display()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (OwnedFd, OwnedFd) {
        rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap()
    }

    #[test]
    fn a_message_and_its_descriptor_cross_a_socket_pair() {
        let (a, b) = pair();
        let file = tempfile::tempfile().unwrap();
        let msg = Reply::Spawned {
            id: "abc".into(),
            pid: 42,
        };
        send(&a, &msg, Some(file.as_fd())).unwrap();
        send(&a, &Reply::HeldEnd, None).unwrap();
        let mut buf = Vec::new();
        let (got, fd) = recv::<Reply>(&b, &mut buf).unwrap().unwrap();
        assert_eq!(got, msg);
        let fd = fd.expect("the descriptor came");
        use std::os::unix::fs::MetadataExt;
        let same = |f: std::fs::File| f.metadata().map(|m| (m.dev(), m.ino())).unwrap();
        assert_eq!(same(fd.into()), same(file));
        let (got, fd) = recv::<Reply>(&b, &mut buf).unwrap().unwrap();
        assert_eq!((got, fd.is_none()), (Reply::HeldEnd, true));
        drop(a);
        assert!(recv::<Reply>(&b, &mut buf).unwrap().is_none());
    }

    #[test]
    fn messages_encode_to_these_bytes() {
        // A map keyed by `t` (MessagePack, field names kept): the keeper
        // and the node may be different builds, so the bytes are the
        // contract.
        let bytes = rmp_serde::to_vec_named(&Request::Release { id: "ab".into() }).unwrap();
        assert_eq!(
            bytes,
            [
                0x82, 0xa1, b't', 0xa7, b'r', b'e', b'l', b'e', b'a', b's', b'e', 0xa2, b'i', b'd',
                0xa2, b'a', b'b'
            ]
        );
        let exit = Reply::Exited {
            id: "x".into(),
            exit: Exit {
                code: 143,
                signal: Some(15),
            },
        };
        let bytes = rmp_serde::to_vec_named(&exit).unwrap();
        assert_eq!(
            bytes,
            [
                0x83, 0xa1, b't', 0xa6, b'e', b'x', b'i', b't', b'e', b'd', 0xa2, b'i', b'd', 0xa1,
                b'x', 0xa4, b'e', b'x', b'i', b't', 0x82, 0xa4, b'c', b'o', b'd', b'e', 0xcc, 143,
                0xa6, b's', b'i', b'g', b'n', b'a', b'l', 15
            ]
        );
        let back: Reply = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, exit);
    }

    #[test]
    fn an_oversized_message_is_refused_before_it_is_sent() {
        let (a, _b) = pair();
        let msg = Request::Spawn {
            id: "x".into(),
            command: vec!["sh".into()],
            cwd: None,
            env: vec![(b"BIG".to_vec(), vec![b'x'; MAX_MESSAGE])],
            cols: 80,
            rows: 24,
        };
        let e = send(&a, &msg, None).unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
    }
}
