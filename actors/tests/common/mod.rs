//! What the crate's PTY tests share: a session thread as a node runs one.

/// A thread named `name` running a current-thread runtime (as a node runs
/// each session thread) until the sender is dropped.
pub fn session_thread(name: &str) -> (tokio::runtime::Handle, tokio::sync::oneshot::Sender<()>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = runtime.block_on(stopped);
        })
        .unwrap();
    (handle, stop)
}
