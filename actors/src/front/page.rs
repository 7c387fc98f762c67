//! Pages of `list` (and `GET /sessions`): the directory ordered by session
//! id, at most `limit` after the id `after`, and the `next` a client asks
//! for to go on. A directory of 100,000 sessions is about 15 MB as one
//! answer, past the reply bound; pages keep every answer small. Pure logic
//! over ids: `NodeCtx::page` builds records for the page's ids only.

use crate::error::ApiError;

/// The largest page a client may ask for.
pub const MAX_PAGE: u32 = 10_000;

/// The page size asked for, checked: `None` for every session at once
/// (which takes no `after`).
pub fn limit(after: Option<&str>, limit: Option<u32>) -> Result<Option<usize>, ApiError> {
    match limit {
        None if after.is_some() => Err(ApiError::bad_request("`after` needs `limit`")),
        None => Ok(None),
        Some(n) if n == 0 || n > MAX_PAGE => Err(ApiError::bad_request(format!(
            "`limit` must be 1 to {MAX_PAGE}, not {n}"
        ))),
        Some(n) => Ok(Some(n as usize)),
    }
}

/// The ids of the page after `after`, in order, at most `limit` of `ids`
/// (any order), and the `next` of a page that is not the last. Only the
/// ids are ordered, and only those past `after`: a page of a 100,000-
/// session directory sorts ids, not 100,000 session records.
pub fn select(
    mut ids: Vec<String>,
    after: Option<&str>,
    limit: usize,
) -> (Vec<String>, Option<String>) {
    if let Some(after) = after {
        ids.retain(|id| id.as_str() > after);
    }
    let more = ids.len() > limit;
    if more {
        ids.select_nth_unstable(limit);
        ids.truncate(limit);
    }
    ids.sort_unstable();
    // An id both here and in another node's announcement is one session.
    ids.dedup();
    let next = more.then(|| ids.last().cloned()).flatten();
    (ids, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids s000.. in reverse order (the directory's order is any).
    fn dir(n: usize) -> Vec<String> {
        (0..n).rev().map(|i| format!("s{i:03}")).collect()
    }

    #[test]
    fn pages_cover_the_directory_once_in_order() {
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..10 {
            let (page, next) = select(dir(25), after.as_deref(), 10);
            seen.extend(page);
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
        let (first, next) = select(dir(5), None, 2);
        assert_eq!(
            (first, next.as_deref()),
            (vec!["s000".into(), "s001".into()], Some("s001"))
        );
        // s001 was removed meanwhile: the next page starts after it anyway.
        let rest: Vec<String> = dir(5).into_iter().filter(|s| s != "s001").collect();
        let (second, next) = select(rest, Some("s001"), 2);
        assert_eq!(
            (second, next.as_deref()),
            (vec!["s002".into(), "s003".into()], Some("s003"))
        );
    }

    #[test]
    fn bad_bounds_are_refused_and_no_limit_is_everything() {
        assert!(limit(None, Some(0)).is_err());
        assert!(limit(None, Some(MAX_PAGE + 1)).is_err());
        assert!(limit(Some("s000"), None).is_err());
        assert_eq!(limit(None, None).unwrap(), None);
        assert_eq!(
            limit(Some("s"), Some(MAX_PAGE)).unwrap(),
            Some(MAX_PAGE as usize)
        );
        let (last, next) = select(dir(3), Some("s002"), 5);
        assert_eq!((last.len(), next), (0, None));
        // A page exactly as long as what is left is the last.
        let (all, next) = select(dir(3), None, 3);
        assert_eq!((all.len(), next), (3, None));
    }
}
