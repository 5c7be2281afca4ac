//! Issue 19 at CERN's size: 9 members, 10,000 machines, several simulated days of
//! renewals, reboots and churn, in one process (`tests/sim`). Prints the figures.
//!
//! `cargo bench --bench site_sim` (3 days); `cargo bench --bench site_sim -- 7` for 7.

#[path = "../tests/sim/mod.rs"]
mod sim;

use std::time::Instant;

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without
    // it, and then a tenth of a day shows it still runs, in a few seconds.
    let benching = std::env::args().any(|a| a == "--bench");
    let days = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<f64>().ok())
        .unwrap_or(if benching { 3.0 } else { 0.1 });
    let started = Instant::now();
    let report = match sim::Sim::new(sim::Params::site(days)).and_then(sim::Sim::run) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("site_sim: {e}");
            std::process::exit(1);
        }
    };
    println!("{}", report.table(started.elapsed()));
}
