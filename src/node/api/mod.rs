//! What the controller and the node agents exchange, defined once and imported by both sides (it imports neither):
//! the node plan the controller publishes ([`plan`]) and each node's state its agent keeps for `doctor`, `kubectl`
//! and alerts ([`state`], the `NodePullState` resource, whose CustomResourceDefinition in the chart is generated
//! from the type).

pub mod plan;
pub mod state;

pub use plan::{Endpoint, HostEntry, NodePlan, PLAN_FORMAT, PLAN_KEY, RelayEntry};
