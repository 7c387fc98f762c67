//! A real Chromium driven over WebDriver: Debian's `chromium` and
//! `chromium-driver` (deploy/test.sh installs them), chromedriver on a free
//! loopback port in its own process group with a fresh profile, one
//! headless browser session; the whole group killed on drop. Waits poll the
//! page with generous bounds.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

use super::{within, PATIENCE};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// One browser at a time: two cores do not run several Chromiums and
/// nodes at once without turning every wait into a race with the clock.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub struct Browser {
    pub client: Client,
    driver: Child,
    profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a `width`x`height`
    /// window.
    pub async fn start(width: u32, height: u32) -> Browser {
        Self::start_with(width, height, &[]).await
    }

    /// `start` with more Chromium flags.
    pub async fn start_with(width: u32, height: u32, flags: &[String]) -> Browser {
        for tool in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(tool).exists(),
                "{tool} is missing: install Debian's chromium and chromium-driver \
                 (bash deploy/test.sh does)"
            );
        }
        let profile = tempfile::tempdir().expect("profile dir");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let log = std::fs::File::create(profile.path().join("chromedriver.log")).unwrap();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let mut browser_args = vec![
            "--headless=new".to_string(),
            // Root in a container: Chromium's own sandbox cannot start.
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            // No network here but loopback: nothing in the background.
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            // A hidden page keeps its timers and rendering going.
            "--disable-background-timer-throttling".into(),
            "--disable-renderer-backgrounding".into(),
            format!("--window-size={width},{height}"),
        ];
        browser_args.extend_from_slice(flags);
        browser_args.push(format!(
            "--user-data-dir={}",
            profile.path().join("chromium").display()
        ));
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": CHROMIUM, "args": browser_args },
        });
        let caps = match caps {
            Value::Object(map) => map,
            _ => unreachable!(),
        };
        within(PATIENCE, "chromedriver to listen", async {
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                page_pause().await;
            }
        })
        .await;
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = within(
            PATIENCE,
            "chromedriver to start a browser",
            ClientBuilder::new(connector)
                .capabilities(caps)
                .connect(&format!("http://127.0.0.1:{port}")),
        )
        .await
        .unwrap_or_else(|e| panic!("chromedriver refused a session: {e}"));
        Browser {
            client,
            driver,
            profile,
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("the page loads");
    }

    /// Runs `script` (a function body: `return ...`) in the page.
    pub async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Polls `script` until it returns something truthy, and returns it.
    pub async fn wait_js(&self, what: &str, script: &str) -> Value {
        within(PATIENCE, what, self.poll_js(script)).await
    }

    /// As `wait_js`; if it times out, the failure also says what
    /// `explain` (a script) finds in the page then.
    pub async fn wait_js_explained(&self, what: &str, script: &str, explain: &str) -> Value {
        match tokio::time::timeout(PATIENCE, self.poll_js(script)).await {
            Ok(v) => v,
            Err(_) => panic!(
                "timed out after {PATIENCE:?} waiting for: {what}; the page: {}",
                self.js(explain).await
            ),
        }
    }

    async fn poll_js(&self, script: &str) -> Value {
        loop {
            let v = self.js(script).await;
            if !matches!(v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("") {
                return v;
            }
            page_pause().await;
        }
    }

    pub async fn find(&self, css: &str) -> Element {
        within(PATIENCE, css, async {
            loop {
                if let Ok(e) = self.client.find(Locator::Css(css)).await {
                    return e;
                }
                page_pause().await;
            }
        })
        .await
    }

    /// Clicks what `locator` finds, finding it again when the page
    /// replaced it meanwhile (the sessions table is redrawn on changes).
    pub async fn click(&self, locator: Locator<'_>) {
        let what = format!("{locator:?}");
        within(PATIENCE, &what, async {
            loop {
                if let Ok(e) = self.client.find(locator).await {
                    match e.click().await {
                        Ok(()) => return,
                        Err(fantoccini::error::CmdError::Standard(w))
                            if w.error == fantoccini::error::ErrorStatus::StaleElementReference => {
                        }
                        Err(e) => panic!("click {what}: {e}"),
                    }
                }
                page_pause().await;
            }
        })
        .await
    }

    pub async fn displayed(&self, css: &str) -> bool {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e.is_displayed().await.unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Types into the focused terminal (xterm.js listens on its helper
    /// textarea).
    pub async fn type_into_terminal(&self, text: &str) {
        let area = self.find(".pane.active .xterm-helper-textarea").await;
        area.send_keys(text).await.expect("keys reach the terminal");
    }

    pub async fn screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(path, png).expect("write the screenshot");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.profile.path().join("chromedriver.log")).unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver and the Chromium it started share its group.
        let pgid = nix::unistd::Pid::from_raw(self.driver.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}

/// Where the tests leave the console's screenshots for the docs.
pub fn docs_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(name)
}

/// Between two polls of the page: each poll is a WebDriver round trip.
async fn page_pause() {
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
}
