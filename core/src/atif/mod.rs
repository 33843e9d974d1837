//! ATIF v1.7 (the Agent Trajectory Interchange Format of Harbor, which NeMo Gym 0.7 exports and
//! re-verifies) both ways: [`to_atif`] writes a Trajectory as an ATIF document, [`from_atif`]
//! reads one made by any producer back into a Trajectory, [`export_jsonl`] writes NeMo Gym's
//! export layout, [`import_path`] reads files, export folders and Harbor trials, and
//! [`rejudge`] scores imported trajectories with an environment's own judge. See docs/atif.md.

mod files;
mod from;
mod schema;
mod time;
mod to;

pub use files::{export_jsonl, import_path, parse, rejudge, rejudge_with, Replay};
pub use from::{from_atif, RecordedReward};
pub use schema::*;
pub use time::{from_iso, to_iso};
pub use to::{to_atif, ExportOptions};
