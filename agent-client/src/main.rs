//! `sibyl-agent`: command-line client of sibyl-server (see `sibyl_agent::cli`).

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = sibyl_agent::cli::Cli::parse();
    let code = sibyl_agent::cli::run(cli, &mut std::io::stdout(), &mut std::io::stderr()).await;
    std::process::exit(code);
}
