//! Checking a `create` request against the protocol's bounds before any
//! process is started: pure logic, so every rule has a unit test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use termesh_config::defaults::{MAX_COLS, MAX_ROWS};

use termesh_transport::{CreateRequest, ErrorCode};

use crate::error::ApiError;

const MAX_ARGS: usize = 256;
const MAX_ARG: usize = 4096;
const MAX_ENV: usize = 256;
pub const MAX_NAME: usize = 256;
pub const MAX_TAGS: usize = 64;
pub const MAX_TAG: usize = 64;

/// A create request with every field checked and every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateSpec {
    pub command: Vec<String>,
    pub cwd: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub cols: u16,
    pub rows: u16,
    pub name: Option<String>,
    pub tags: Vec<String>,
    /// What `revive` runs, when the request named it.
    pub resume_command: Option<Vec<String>>,
}

/// Defaults for what a request leaves out.
#[derive(Debug, Clone)]
pub struct CreateDefaults {
    pub command: Vec<String>,
    pub cols: u16,
    pub rows: u16,
}

pub fn check_create(
    req: CreateRequest,
    node: &str,
    defaults: &CreateDefaults,
) -> Result<CreateSpec, ApiError> {
    if let Some(target) = &req.node {
        if target != node {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                format!(
                    "node `{target}` cannot be reached from `{node}` (no cluster mesh configured)"
                ),
            ));
        }
    }
    let command = req.command.unwrap_or_else(|| defaults.command.clone());
    check_command("command", &command)?;
    if let Some(resume) = &req.resume_command {
        check_command("resume_command", resume)?;
    }
    // Checked on disk by `check_cwd`, off the registry's thread: a hung
    // mount must not stall the node.
    let cwd = req.cwd.map(PathBuf::from);
    let env = req.env.unwrap_or_default();
    if env.len() > MAX_ENV
        || env.iter().any(|(k, v)| {
            k.is_empty()
                || k.contains('=')
                || k.contains('\0')
                || v.contains('\0')
                || k.len() > MAX_ARG
                || v.len() > MAX_ARG
        })
    {
        return Err(ApiError::bad_request(format!(
            "`env`: at most {MAX_ENV} entries; names non-empty without `=` or NUL"
        )));
    }
    let cols = size_field("cols", req.cols, defaults.cols, MAX_COLS)?;
    let rows = size_field("rows", req.rows, defaults.rows, MAX_ROWS)?;
    if let Some(name) = &req.name {
        check_name(name)?;
    }
    let tags = req.tags.unwrap_or_default();
    check_tags(&tags)?;
    Ok(CreateSpec {
        command,
        cwd,
        env,
        cols,
        rows,
        name: req.name,
        tags,
        resume_command: req.resume_command,
    })
}

/// A program and its arguments, bounded.
fn check_command(field: &str, command: &[String]) -> Result<(), ApiError> {
    if command.is_empty() || command[0].is_empty() {
        return Err(ApiError::bad_request(format!(
            "`{field}` must name a program"
        )));
    }
    if command.len() > MAX_ARGS
        || command
            .iter()
            .any(|a| a.len() > MAX_ARG || a.contains('\0'))
    {
        return Err(ApiError::bad_request(format!(
            "`{field}`: at most {MAX_ARGS} arguments of at most {MAX_ARG} bytes, without NUL"
        )));
    }
    Ok(())
}

/// The file-system part of the checks (may block on a slow mount: call it
/// off any actor thread).
pub fn check_cwd(cwd: &Path) -> Result<(), ApiError> {
    if cwd.is_dir() {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "`cwd` {:?} is not an existing directory",
            cwd.display().to_string()
        )))
    }
}

pub fn size_field(key: &str, value: Option<u64>, default: u16, max: u16) -> Result<u16, ApiError> {
    match value {
        None => Ok(default),
        Some(v) if v >= 1 && v <= max as u64 => Ok(v as u16),
        Some(v) => Err(ApiError::bad_request(format!(
            "`{key}` = {v}: must be 1 to {max}"
        ))),
    }
}

pub fn check_name(name: &str) -> Result<(), ApiError> {
    if name.len() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request(format!(
            "`name`: at most {MAX_NAME} bytes, no control characters"
        )));
    }
    Ok(())
}

pub fn check_tags(tags: &[String]) -> Result<(), ApiError> {
    if tags.len() > MAX_TAGS
        || tags
            .iter()
            .any(|t| t.is_empty() || t.len() > MAX_TAG || t.chars().any(char::is_control))
    {
        return Err(ApiError::bad_request(format!(
            "`tags`: at most {MAX_TAGS} tags of 1 to {MAX_TAG} bytes, no control characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> CreateDefaults {
        CreateDefaults {
            command: vec!["/bin/sh".into()],
            cols: 120,
            rows: 30,
        }
    }

    #[test]
    fn defaults_apply() {
        let spec = check_create(CreateRequest::default(), "n1", &defaults()).unwrap();
        assert_eq!(spec.command, vec!["/bin/sh"]);
        assert_eq!((spec.cols, spec.rows), (120, 30));
    }

    #[test]
    fn each_rule_has_a_clear_error() {
        let bad = |req: CreateRequest| check_create(req, "n1", &defaults()).unwrap_err();
        let e = check_cwd(Path::new("/no/such/dir")).unwrap_err();
        assert!(e.code == ErrorCode::BadRequest && e.message.contains("/no/such/dir"));
        let e = bad(CreateRequest {
            node: Some("n2".into()),
            ..Default::default()
        });
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert_eq!(
            bad(CreateRequest {
                cols: Some(0),
                ..Default::default()
            })
            .code,
            ErrorCode::BadRequest
        );
        assert_eq!(
            bad(CreateRequest {
                rows: Some(501),
                ..Default::default()
            })
            .code,
            ErrorCode::BadRequest
        );
        assert_eq!(
            bad(CreateRequest {
                command: Some(vec![]),
                ..Default::default()
            })
            .code,
            ErrorCode::BadRequest
        );
        let env = BTreeMap::from([("A=B".to_string(), "x".to_string())]);
        assert_eq!(
            bad(CreateRequest {
                env: Some(env),
                ..Default::default()
            })
            .code,
            ErrorCode::BadRequest
        );
        assert_eq!(
            bad(CreateRequest {
                tags: Some(vec!["".into()]),
                ..Default::default()
            })
            .code,
            ErrorCode::BadRequest
        );
        assert_eq!(
            bad(CreateRequest {
                name: Some("a\nb".into()),
                ..Default::default()
            })
            .code,
            ErrorCode::BadRequest
        );
    }

    #[test]
    fn own_node_name_is_fine() {
        let req = CreateRequest {
            node: Some("n1".into()),
            cwd: Some("/".into()),
            ..Default::default()
        };
        assert!(check_create(req, "n1", &defaults()).is_ok());
    }
}
