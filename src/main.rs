use std::process::ExitCode;

use clap::Parser;
use local_registry_publisher::{app, config::Args};

#[tokio::main]
async fn main() -> ExitCode {
    app::run(Args::parse()).await
}
