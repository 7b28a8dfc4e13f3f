fn main() {
    std::process::exit(deltaspec::cli::main());
}
