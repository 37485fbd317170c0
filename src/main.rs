use std::process::ExitCode;

use clap::Parser;
use local_registry_publisher::{app, cli, config::Args, memory};

fn main() -> ExitCode {
    // Before the runtime starts its threads, so none gets an arena of its own.
    memory::use_one_arena();
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(error) => return refused(&error),
    };
    let invoked_as = std::env::args().next().unwrap_or_default();
    // Installed under kubectl's plugin name, the binary is `kubectl registry-hosting get`.
    if args.command.is_none() && cli::invoked_as_plugin(&invoked_as) {
        // As a plugin it only reads: running the controller needs an explicit binary.
        eprintln!("usage: kubectl registry-hosting get [-o text|json|yaml] | render -f FILE   (see --help)");
        return ExitCode::from(2);
    }
    // One thread: the controller waits on the API server, not on its own CPU. A single thread hands a watch event to
    // the reconcile loop without waking another, and keeps one heap (`make bench`: 9.8 -> 9.0 MiB idle).
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(app::run(args)),
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

/// clap's answer to the command line (a refusal, `--help`, `--version`). It quotes a refused value as given, so it is
/// escaped like cluster text before it reaches the terminal.
fn refused(error: &clap::Error) -> ExitCode {
    let text = error.render().to_string();
    if error.use_stderr() {
        cli::text::eprint_document(&text);
    } else {
        cli::text::print_document(&text);
    }
    ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2))
}
