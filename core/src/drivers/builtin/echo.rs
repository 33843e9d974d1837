//! `builtin:echo`: the logic of OpenEnv's `openenv init` scaffold.

use serde_json::{json, Value};

use super::common::obj;
use crate::contract::{JsonMap, Manifest, Mode, Observation, RewardTiming, Step, TaskRef};
use crate::env::{Environment, Episode};
use crate::error::{Error, Result};

pub(super) struct Echo {
    manifest: Manifest,
    max_steps: usize,
}

impl Echo {
    pub(super) fn new(id: &str, max_steps: usize) -> Self {
        let mut m = Manifest::new(id, "echo", "builtin", Mode::Step);
        m.version = Some(env!("CARGO_PKG_VERSION").to_string());
        m.license = Some("Apache-2.0".into());
        m.description = Some(
            "Echoes the message back; reward min(0.1 * length, 1) per step (the logic of the \
             openenv init scaffold)."
                .into(),
        );
        m.capabilities.text = true;
        m.capabilities.reward_timing = RewardTiming::PerStep;
        m.action_schema = Some(obj(json!({"type": "string", "description": "the message"})));
        m.observation_schema = Some(obj(json!({
            "type": "object",
            "properties": {"echoed_message": {"type": "string"}, "message_length": {"type": "integer"}}
        })));
        Echo {
            manifest: m,
            max_steps,
        }
    }
}

pub(super) struct EchoEpisode {
    env_id: String,
    obs: Observation,
}

fn echo_observation(message: &str) -> Observation {
    let mut obs = Observation::text(message);
    obs.data = json!({"echoed_message": message, "message_length": message.chars().count()});
    obs
}

impl Environment for Echo {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn open(&self, _task: Option<&TaskRef>, _seed: Option<i64>) -> Result<Box<dyn Episode>> {
        Ok(Box::new(EchoEpisode {
            env_id: self.manifest.id.clone(),
            obs: echo_observation("Echo environment ready!"),
        }))
    }

    fn default_max_steps(&self) -> usize {
        self.max_steps
    }
}

impl Episode for EchoEpisode {
    fn observation(&self) -> &Observation {
        &self.obs
    }

    fn act(&mut self, action: &Value) -> Result<Step> {
        let message = action.as_str().ok_or_else(|| Error::InvalidAction {
            env: self.env_id.clone(),
            action: crate::contract::preview(action),
            reason: "expected the message (a JSON string)".into(),
        })?;
        self.obs = echo_observation(message);
        Ok(Step {
            action: action.clone(),
            observation: self.obs.clone(),
            reward: (message.chars().count() as f64 * 0.1).min(1.0),
            terminated: false,
            truncated: false,
            info: JsonMap::new(),
        })
    }
}
