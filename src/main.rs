//! The `strait` binary: everything lives in the library.

/// mimalloc rather than the system allocator: with a large cluster set the
/// first sync's transient list pages left glibc's arenas fragmented (the
/// `kube_scale` bench settled 28% lower with mimalloc), and the tunnels'
/// throughput is level or better with it (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    strait::cli::main()
}
