//! The summary of `nenyax run`: episodes, errors, means with and without the errors, pass
//! counts where the judge decides them, and the optional line per episode.

use nenyax::limits::count;
use nenyax::Trajectory;

/// What a run's episodes came to, for its summary line.
#[derive(Default)]
pub(crate) struct Tally {
    episodes: usize,
    pub(crate) errors: usize,
    pub(crate) first_error: Option<String>,
    /// Episodes that ended without an error and were judged, and their scores' sum.
    scored: usize,
    score_sum: f64,
    /// Judged episodes whose judge decides pass/fail, by verdict.
    passed: usize,
    not_passed: usize,
}

impl Tally {
    pub(crate) fn add(&mut self, traj: &Trajectory) {
        self.episodes += 1;
        if let Some(e) = &traj.error {
            self.errors += 1;
            self.first_error.get_or_insert_with(|| e.clone());
            return;
        }
        if let Some(s) = traj.score() {
            self.scored += 1;
            self.score_sum += s;
        }
        match traj.judgment.as_ref().and_then(|j| j.passed) {
            Some(true) => self.passed += 1,
            Some(false) => self.not_passed += 1,
            None => {}
        }
    }

    /// Episodes and errors, the mean over all (an error scores 0) and over those that
    /// completed, and pass counts only where the judge decides pass/fail.
    pub(crate) fn summary(&self) -> String {
        let n = self.episodes;
        let mut s = format!("{}, {}", count(n, "episode"), count(self.errors, "error"));
        if n > 0 {
            s += &format!(
                "; mean score {:.3} over all {n} (errors count as 0)",
                self.score_sum / n as f64
            );
            if self.scored > 0 {
                s += &format!(
                    ", {:.3} over the {} completed",
                    self.score_sum / self.scored as f64,
                    self.scored
                );
            }
            let unjudged = n - self.errors - self.scored;
            if unjudged > 0 {
                s += &format!(", {unjudged} not judged");
            }
        }
        if self.passed + self.not_passed > 0 {
            s += &format!("; {} passed, {} not passed", self.passed, self.not_passed);
        }
        s
    }
}

/// One episode of `run --episodes`: index, task, seed, then its score and verdict or its error.
pub(crate) fn episode_line(i: usize, traj: &Trajectory) -> String {
    let task = traj.task.as_ref().map_or("-", |t| t.id.as_str());
    let seed = traj.seed.map_or("-".into(), |s| s.to_string());
    let outcome = match (&traj.error, traj.score()) {
        // One line per episode, whatever the error says.
        (Some(e), _) => format!("error: {}", e.replace('\n', " ")),
        (None, Some(score)) => {
            let verdict = match traj.judgment.as_ref().and_then(|j| j.passed) {
                Some(true) => ", passed",
                Some(false) => ", not passed",
                None => "",
            };
            format!("score {score:.3}{verdict}")
        }
        (None, None) => "not judged".into(),
    };
    format!("episode {i}: task {task}, seed {seed}, {outcome}")
}
