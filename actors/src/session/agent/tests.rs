//! The state core and the screen rules, without a session.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use termesh_transport::AgentState;

use super::rules::{classify, program_name, AgentSpec, Agents, Seen};
use super::*;

fn rows(text: &str) -> Vec<String> {
    text.lines().map(str::to_string).collect()
}

/// The cursor after the last row's text.
fn after_last(rows: &[String]) -> (usize, usize) {
    let row = rows.len() - 1;
    (rows[row].chars().count(), row)
}

#[test]
fn a_yes_no_question_at_the_bottom_asks() {
    let screen = rows("building...\ndone\nOverwrite config.toml? [y/N] ");
    let seen = classify(&screen, after_last(&screen), None);
    assert_eq!(seen, Seen::Asking("Overwrite config.toml? [y/N]".into()));
    // Above the last three rows it is history, not a question.
    let old = rows("Overwrite? [y/n] y\na\nb\nc\nd");
    assert_eq!(classify(&old, after_last(&old), None), Seen::Nothing);
    // Answered: the program went on below it.
    let answered = rows("Overwrite? [y/n] y\nanswered y");
    assert_eq!(classify(&answered, (0, 2), None), Seen::Nothing);
}

#[test]
fn the_lower_of_a_question_and_a_spinner_wins() {
    let menu_then_spinner =
        rows("Do you want to proceed?\n❯ 1. Yes\n  2. No\n⠋ Running… (esc to interrupt)");
    assert_eq!(classify(&menu_then_spinner, (0, 0), None), Seen::Busy);
    let spinner_then_question =
        rows("✻ Working… (esc to interrupt)\nDo you want to proceed?\n❯ 1. Yes");
    assert_eq!(
        classify(&spinner_then_question, (0, 0), None),
        Seen::Asking("Do you want to proceed?".into())
    );
}

#[test]
fn a_numbered_choice_asks_with_the_question_above_it() {
    let screen = rows(
        "╭──────────────────────────────╮\n\
         │ Bash command                 │\n\
         │   rm -rf build               │\n\
         │ Do you want to proceed?      │\n\
         │ ❯ 1. Yes                     │\n\
         │   2. No, and tell me why     │\n\
         ╰──────────────────────────────╯",
    );
    let seen = classify(&screen, (0, 0), None);
    assert_eq!(seen, Seen::Asking("Do you want to proceed?".into()));
}

#[test]
fn a_shell_prompt_with_the_cursor_after_it_is_a_prompt() {
    let mut screen = rows("$ make\nok\nuser@host:~/src$");
    // The row is trimmed; the cursor stands after the prompt's blank.
    let cursor = (screen[2].len() + 1, 2);
    assert_eq!(
        classify(&screen, cursor, None),
        Seen::Prompt("user@host:~/src$".into())
    );
    // Someone typing after it: not a prompt waiting.
    screen[2].push_str(" ls -l");
    assert_eq!(classify(&screen, after_last(&screen), None), Seen::Nothing);
    // The cursor elsewhere (output running below): not a prompt.
    let running = rows("$ sleep 10");
    assert_eq!(classify(&running, (0, 1), None), Seen::Nothing);
}

#[test]
fn a_spinner_or_an_interrupt_hint_works() {
    let screen = rows("> fix the bug\n\n✻ Pondering… (12s · esc to interrupt)");
    assert_eq!(classify(&screen, (0, 0), None), Seen::Busy);
    let braille = rows("⠋ Compiling termesh…");
    assert_eq!(classify(&braille, (0, 5), None), Seen::Busy);
}

#[test]
fn an_agents_own_patterns_come_first_and_config_overrides_built_ins() {
    let agents = Agents::default();
    let claude = agents.of(&["/usr/bin/claude".into()]).expect("built in");
    assert_eq!(
        claude.resume,
        Some(vec!["claude".into(), "--continue".into()])
    );
    let screen = rows("Do you want to make this edit to main.rs\n❯ 1. Yes");
    assert_eq!(
        classify(&screen, (0, 0), Some(&claude)),
        Seen::Asking("Do you want to make this edit to main.rs".into())
    );
    let custom = Agents::new(&[AgentSpec {
        name: "claude".into(),
        command: vec!["claude".into()],
        waiting: vec!["^READY FOR YOU$".into()],
        working: vec![],
        resume: None,
    }])
    .unwrap();
    let mine = custom.of(&["claude".into()]).unwrap();
    assert_eq!(mine.resume, None, "the entry replaces the built-in");
    let screen = rows("ready for you");
    assert_eq!(
        classify(&screen, (0, 0), Some(&mine)),
        Seen::Asking("ready for you".into())
    );
    let bad = Agents::new(&[AgentSpec {
        name: "x".into(),
        command: vec!["x".into()],
        waiting: vec!["(".into()],
        working: vec![],
        resume: None,
    }]);
    assert!(bad.unwrap_err().contains("agent `x`"));
}

#[test]
fn the_program_is_the_first_word_or_a_shell_scripts_first() {
    let c = |words: &[&str]| program_name(&words.iter().map(|w| w.to_string()).collect::<Vec<_>>());
    assert_eq!(
        c(&["/opt/bin/codex", "--full-auto"]).as_deref(),
        Some("codex")
    );
    assert_eq!(
        c(&["sh", "-c", "exec aider --yes"]).as_deref(),
        Some("aider")
    );
    assert_eq!(c(&["bash"]).as_deref(), Some("bash"));
    assert_eq!(c(&[]), None);
}

#[test]
fn a_waiting_for_is_cut_to_its_bound() {
    let long = format!("{} [y/n]", "x".repeat(500));
    let screen = rows(&long);
    let Seen::Asking(line) = classify(&screen, (0, 0), None) else {
        panic!("asks");
    };
    assert_eq!(line.chars().count(), rules::MAX_WAITING_FOR + 1);
}

#[test]
fn output_works_then_quiet_idles() {
    let t0 = Instant::now();
    let mut t = Tracker::new(t0, 0);
    assert_eq!(t.view().state, AgentState::Working);
    assert_eq!(t.output(t0, 0), None, "already working");
    assert_eq!(t.due(t0), Due::At(t0 + SETTLE));
    let look = t0 + SETTLE;
    assert_eq!(t.due(look), Due::Look);
    t.looking();
    assert_eq!(t.looked(look, 250, Seen::Nothing), None);
    assert_eq!(t.due(look), Due::At(t0 + ACTIVE));
    assert_eq!(t.due(t0 + ACTIVE), Due::Quiet);
    let idle = t.quiet(3000).unwrap();
    assert_eq!((idle.state, idle.since), (AgentState::Idle, 3000));
    assert_eq!(t.due(t0 + ACTIVE * 10), Due::Nothing, "idle costs nothing");
    let later = t0 + ACTIVE * 10;
    assert_eq!(t.output(later, 30_000).unwrap().state, AgentState::Working);
}

#[test]
fn flowing_output_is_read_at_least_every_max_settle() {
    let t0 = Instant::now();
    let mut t = Tracker::new(t0, 0);
    let mut now = t0;
    while now < t0 + MAX_SETTLE {
        t.output(now, 0);
        now += SETTLE / 2;
    }
    assert_eq!(t.due(now), Due::Look);
}

#[test]
fn a_hook_holds_until_the_screen_changes() {
    let t0 = Instant::now();
    let mut t = Tracker::new(t0, 0);
    t.looking();
    t.looked(t0, 0, Seen::Busy);
    let waiting = t.hook(10, Hook::Waiting("Claude needs your permission".into()));
    assert_eq!(
        waiting.unwrap().waiting_for.as_deref(),
        Some("Claude needs your permission")
    );
    // The same screen again: the hook's state stays.
    t.looking();
    assert_eq!(t.looked(t0, 20, Seen::Busy), None);
    assert_eq!(t.view().state, AgentState::Waiting);
    // The screen changed: the rules speak again.
    t.looking();
    let prompt = t.looked(t0, 30, Seen::Asking("Allow? [y/n]".into()));
    assert_eq!(
        prompt, None,
        "still waiting: the question is updated in place"
    );
    assert_eq!(t.view().waiting_for.as_deref(), Some("Allow? [y/n]"));
    t.looking();
    let busy = t.looked(t0, 40, Seen::Busy).unwrap();
    assert_eq!((busy.state, busy.since), (AgentState::Working, 40));
}

proptest! {
    /// Whatever comes, the view is consistent: a question only when
    /// waiting, `since` never goes back, and a session that keeps printing
    /// is never idle.
    #[test]
    fn the_view_stays_consistent(steps in proptest::collection::vec(0u8..6, 1..60)) {
        let t0 = Instant::now();
        let mut t = Tracker::new(t0, 0);
        let (mut now, mut ms) = (t0, 0u64);
        for step in steps {
            now += Duration::from_millis(400);
            ms += 400;
            match step {
                0 => { t.output(now, ms); }
                1 => { if t.due(now) == Due::Look { t.looking(); } }
                2 => { t.looked(now, ms, Seen::Asking("q? [y/n]".into())); }
                3 => { t.looked(now, ms, Seen::Nothing); }
                4 => { if t.due(now) == Due::Quiet { t.quiet(ms); } }
                _ => { t.hook(ms, Hook::Working); }
            }
            let view = t.view();
            prop_assert_eq!(view.waiting_for.is_some(), view.state == AgentState::Waiting);
            prop_assert!(view.since <= ms);
            if step == 0 {
                prop_assert_ne!(view.state, AgentState::Idle);
            }
        }
    }
}
