//! Pages of `list` (and `GET /sessions`): the directory ordered by session
//! id, at most `limit` after the id `after`, and the `next` a client asks
//! for to go on. A directory of 100,000 sessions is about 15 MB as one
//! answer, past the reply bound; pages keep every answer small. Pure logic.

use termesh_transport::SessionInfo;

use crate::error::ApiError;

/// The largest page a client may ask for.
pub const MAX_PAGE: u32 = 10_000;

/// The page of `sessions` (any order) after `after`, at most `limit` long;
/// without `limit`, every session (and no `after`). `next` names the last
/// id of a page that is not the last.
pub fn page(
    mut sessions: Vec<SessionInfo>,
    after: Option<&str>,
    limit: Option<u32>,
) -> Result<(Vec<SessionInfo>, Option<String>), ApiError> {
    let Some(limit) = limit else {
        if after.is_some() {
            return Err(ApiError::bad_request("`after` needs `limit`"));
        }
        return Ok((sessions, None));
    };
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "`limit` must be 1 to {MAX_PAGE}, not {limit}"
        )));
    }
    sessions.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    let start = after.map_or(0, |a| sessions.partition_point(|s| s.id.as_str() <= a));
    let end = (start + limit as usize).min(sessions.len());
    let next = (end < sessions.len()).then(|| sessions[end - 1].id.clone());
    sessions.truncate(end);
    sessions.drain(..start);
    Ok((sessions, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(n: usize) -> Vec<SessionInfo> {
        (0..n)
            .rev()
            .map(|i| SessionInfo {
                id: format!("s{i:03}"),
                name: None,
                node: "a".into(),
                command: vec!["sh".into()],
                cwd: None,
                status: termesh_transport::SessionStatus::Running,
                exit_code: None,
                phase: None,
                created_at: 0,
                cols: 80,
                rows: 24,
                last_seq: 0,
                viewers: 0,
                idle_ms: 0,
                at_prompt: false,
                tags: Vec::new(),
            })
            .collect()
    }

    fn ids(v: &[SessionInfo]) -> Vec<&str> {
        v.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn pages_cover_the_directory_once_in_order() {
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..10 {
            let (page, next) = page(dir(25), after.as_deref(), Some(10)).unwrap();
            seen.extend(ids(&page).into_iter().map(str::to_string));
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let all: Vec<String> = (0..25).map(|i| format!("s{i:03}")).collect();
        assert_eq!(seen, all);
    }

    #[test]
    fn a_session_gone_between_pages_does_not_stop_the_walk() {
        let (first, next) = page(dir(5), None, Some(2)).unwrap();
        assert_eq!(
            (ids(&first), next.as_deref()),
            (vec!["s000", "s001"], Some("s001"))
        );
        // s001 was removed meanwhile: the next page starts after it anyway.
        let rest: Vec<SessionInfo> = dir(5).into_iter().filter(|s| s.id != "s001").collect();
        let (second, next) = page(rest, Some("s001"), Some(2)).unwrap();
        assert_eq!(
            (ids(&second), next.as_deref()),
            (vec!["s002", "s003"], Some("s003"))
        );
    }

    #[test]
    fn bad_bounds_are_refused_and_no_limit_is_everything() {
        assert!(page(dir(3), None, Some(0)).is_err());
        assert!(page(dir(3), None, Some(MAX_PAGE + 1)).is_err());
        assert!(page(dir(3), Some("s000"), None).is_err());
        let (all, next) = page(dir(3), None, None).unwrap();
        assert_eq!((all.len(), next), (3, None));
        let (last, next) = page(dir(3), Some("s002"), Some(5)).unwrap();
        assert_eq!((last.len(), next), (0, None));
    }
}
