//! Was a gated pod ever shown ready while its container was dead, or its gate flipped while its
//! containers did not change? Checked against the runtime's own account of each container (its
//! CRI `started_at` and `finished_at`, nanoseconds on the node's clock), not the kubelet's report of
//! it: the kubelet reports starts late or never while a pod is in its restart backoff or the node is
//! busy, so a checker on its report flags what is not wrong.
//!
//! For pods of one container (the backends of `cargo bench --bench traffic`). What the apiserver
//! showed of a pod is a list of observations (a watch event each, stamped when it arrived: never
//! before the write it shows). The rules:
//! - **made ready with a dead container**: a change to True of plegd's condition or of Ready, seen
//!   at `t` after an observation at `p` that showed it otherwise, needs a container of the pod
//!   running at some moment of `(p, t]` (started at or before `t`, not finished by `p`);
//! - **a flip without a change**: a change of plegd's condition to False needs a container's death
//!   after the observation before the condition last became True and no later than it was seen,
//!   and each death accounts for one such change at most;
//! - **a condition gone**: plegd's condition, once shown, is never removed.

use std::time::SystemTime;

/// One container of a pod, as the runtime says it lived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Life {
    pub started: SystemTime,
    pub finished: Option<SystemTime>,
}

impl Life {
    /// Running at some moment after `from` and no later than `to`.
    fn ran_within(&self, from: SystemTime, to: SystemTime) -> bool {
        self.started <= to && self.finished.is_none_or(|f| f > from)
    }
}

/// What one watch event showed of a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shown {
    pub at: SystemTime,
    pub ready: bool,
    /// plegd's condition: None where the pod has none (yet).
    pub gate: Option<bool>,
}

/// The outcome for one pod: the changes of plegd's condition seen, and the rules broken.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub transitions: usize,
    pub violations: Vec<String>,
}

/// Check `shown` (in the order seen) against `lives` (every container the runtime ran for the pod).
pub fn check(pod: &str, shown: &[Shown], lives: &[Life]) -> Verdict {
    let mut verdict = Verdict::default();
    let mut deaths: Vec<(SystemTime, bool)> = lives.iter().filter_map(|l| l.finished).map(|f| (f, false)).collect();
    deaths.sort();
    // The observation before plegd's condition last became True (None: True as first seen).
    let mut true_since: Option<SystemTime> = None;
    for pair in shown.windows(2) {
        let (before, now) = (pair[0], pair[1]);
        let running_between = || lives.iter().any(|l| l.ran_within(before.at, now.at));
        if now.ready && !before.ready && !running_between() {
            verdict.violations.push(format!(
                "{pod}: made Ready at {:?} with no container running since {:?}",
                now.at, before.at
            ));
        }
        if now.gate == before.gate {
            continue;
        }
        match (before.gate, now.gate) {
            (_, Some(true)) => {
                if before.gate.is_some() {
                    verdict.transitions += 1;
                }
                if !running_between() {
                    verdict.violations.push(format!(
                        "{pod}: plegd's condition True at {:?} with no container running since {:?}",
                        now.at, before.at
                    ));
                }
                true_since = Some(before.at);
            }
            (Some(true), Some(false)) => {
                verdict.transitions += 1;
                let from = true_since.unwrap_or(SystemTime::UNIX_EPOCH);
                match deaths.iter_mut().find(|(f, used)| !used && *f > from && *f <= now.at) {
                    Some(death) => death.1 = true,
                    None => verdict.violations.push(format!(
                        "{pod}: plegd's condition False at {:?} with no container's death since {from:?} to account for it",
                        now.at
                    )),
                }
            }
            (None, Some(false)) => {}
            (Some(_), None) => verdict
                .violations
                .push(format!("{pod}: plegd's condition gone at {:?}", now.at)),
            (None, None) | (Some(false), Some(false)) => unreachable!("equal conditions skipped above"),
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000) + Duration::from_millis(ms)
    }

    fn shown(ms: u64, ready: bool, gate: Option<bool>) -> Shown {
        Shown {
            at: at(ms),
            ready,
            gate,
        }
    }

    fn life(started: u64, finished: Option<u64>) -> Life {
        Life {
            started: at(started),
            finished: finished.map(at),
        }
    }

    #[test]
    fn a_kill_and_a_restart_seen_in_order_break_no_rule() {
        let lives = [life(0, Some(5_000)), life(5_200, None)];
        let seen = [
            shown(100, true, Some(true)),
            shown(5_030, false, Some(false)),
            shown(5_240, false, Some(true)),
            shown(5_900, true, Some(true)),
        ];
        assert_eq!(
            check("p", &seen, &lives),
            Verdict {
                transitions: 2,
                violations: vec![]
            }
        );
    }

    #[test]
    fn true_with_no_container_running_since_the_last_observation_is_flagged() {
        // Dead at 5 s, restarted only at 9 s: True seen at 6 s is a lie.
        let lives = [life(0, Some(5_000)), life(9_000, None)];
        let seen = [
            shown(100, true, Some(true)),
            shown(5_030, false, Some(false)),
            shown(6_000, false, Some(true)),
        ];
        let verdict = check("p", &seen, &lives);
        assert_eq!(verdict.violations.len(), 1, "{verdict:?}");
        assert!(verdict.violations[0].contains("plegd's condition True"), "{verdict:?}");
    }

    #[test]
    fn ready_with_no_container_running_is_flagged() {
        let lives = [life(0, Some(5_000)), life(9_000, None)];
        let seen = [
            shown(100, true, Some(true)),
            shown(5_030, false, Some(false)),
            shown(6_000, true, Some(false)),
        ];
        let verdict = check("p", &seen, &lives);
        assert_eq!(verdict.violations.len(), 1, "{verdict:?}");
        assert!(verdict.violations[0].contains("made Ready"), "{verdict:?}");
    }

    #[test]
    fn a_container_that_died_between_two_observations_still_accounts_for_a_true() {
        // plegd read it running at 5.1 s; it died at 5.2 s, before the watch showed the True.
        let lives = [life(0, Some(5_000)), life(5_100, Some(5_200)), life(20_000, None)];
        let seen = [
            shown(100, true, Some(true)),
            shown(5_030, false, Some(false)),
            shown(5_250, false, Some(true)),
            shown(5_260, false, Some(false)),
        ];
        assert_eq!(check("p", &seen, &lives).violations, Vec::<String>::new());
    }

    #[test]
    fn each_death_accounts_for_one_false_only() {
        let lives = [life(0, Some(5_000)), life(5_100, None)];
        let seen = [
            shown(100, true, Some(true)),
            shown(5_030, false, Some(false)),
            shown(5_200, false, Some(true)),
            shown(7_000, false, Some(false)),
        ];
        let verdict = check("p", &seen, &lives);
        assert_eq!(verdict.transitions, 3);
        assert_eq!(verdict.violations.len(), 1, "{verdict:?}");
        assert!(verdict.violations[0].contains("False at"), "{verdict:?}");
    }

    #[test]
    fn a_death_before_the_condition_became_true_does_not_account_for_a_later_false() {
        // The death at 1 s was over before the observation (1.2 s) ahead of the True at 2 s: the
        // False at 3 s has no death of its own.
        let lives = [life(0, Some(1_000)), life(1_500, None)];
        let seen = [
            shown(1_200, false, Some(false)),
            shown(2_000, true, Some(true)),
            shown(3_000, false, Some(false)),
        ];
        let verdict = check("p", &seen, &lives);
        assert_eq!(verdict.violations.len(), 1, "{verdict:?}");
    }

    #[test]
    fn a_condition_removed_is_flagged_and_one_never_shown_is_not() {
        let lives = [life(0, None)];
        let seen = [
            shown(100, false, None),
            shown(200, true, Some(true)),
            shown(300, true, None),
        ];
        let verdict = check("p", &seen, &lives);
        assert_eq!(verdict.transitions, 0);
        assert_eq!(
            verdict.violations,
            vec![format!("p: plegd's condition gone at {:?}", at(300))]
        );
    }
}
