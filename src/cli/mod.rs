//! The `deltaspec` command line: `info`, `logits`, `generate`.
//!
//! Every failure prints one line (`error: …`) and exits with code 2.

mod backends;
mod bench;
mod bench_draft;
mod bench_prefill;
mod bench_spec;
mod convert;
mod draft;
mod drafter_args;
mod generate;
mod info;
mod logits;
mod policy_args;
mod sampling_args;
mod synth;
mod tokens;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "deltaspec",
    version,
    about = "Qwen3.5/3.8 hybrid inference with adaptive speculative decoding"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Architecture, dimensions, layer pattern, tensor types and tokenizer of a model.
    Info {
        /// A qwen35 GGUF file or an HF checkpoint directory.
        model: PathBuf,
    },
    /// Writes the logits of every input position to a safetensors file (tensor `logits`, f32 [T, vocab]).
    Logits(logits::Args),
    /// Greedy generation.
    Generate(Box<generate::Args>),
    /// Lists the backends, whether each runs here, and the embedded kernel targets.
    Backends {
        #[arg(long)]
        json: bool,
    },
    /// Writes a random model with real tensor names and shapes.
    Synth(synth::Args),
    /// Speed measurements.
    #[command(subcommand)]
    Bench(bench::Which),
    /// Converts a drafter checkpoint to GGUF (`--draft <hf-dir>`: a z-lab DFlash drafter).
    Convert(convert::Args),
    /// One DFlash draft after a committed context; writes draft_logits and draft_tokens.
    Draft(draft::Args),
}

/// Runs the CLI with the process arguments and returns the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            // One line: the chain of causes joined, so scripts can grep it.
            eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
            2
        }
    }
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Info { model } => info::run(&model),
        Command::Logits(a) => logits::run(&a),
        Command::Generate(a) => generate::run(&a),
        Command::Synth(a) => synth::run(&a),
        Command::Backends { json } => backends::run(json),
        Command::Bench(w) => bench::run(&w),
        Command::Convert(a) => convert::run(&a),
        Command::Draft(a) => draft::run(&a),
    }
}
