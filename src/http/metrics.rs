//! HTTP counters, kept at their old path: the types live in `crate::http_metrics`, a
//! leaf beside `handles`, so that `handles` (which holds them) need not import `http`
//! (which reads `handles`): the two no longer form an import circle.

pub use crate::http_metrics::{HttpMetrics, RequestCounts};
