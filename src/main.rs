//! The `strait` binary: everything lives in the library.

/// mimalloc rather than the system allocator: with a large cluster set the
/// first sync's transient list pages left glibc's arenas fragmented (the
/// `kube_scale` bench settled 28% lower with mimalloc), and the tunnels'
/// throughput is level or better with it (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    without_transparent_huge_pages();
    strait::cli::main()
}

/// mimalloc asks the kernel for transparent huge pages on the memory it
/// maps (`MADV_HUGEPAGE`), and on a host whose THP setting is `madvise` or
/// `always` a 2 MiB page then stands behind memory of which a gateway
/// touches a little: an idle connection held 1.5–2 KiB more RSS that way,
/// and a started gateway 9–10 MiB more (docs/performance.md, "Idle
/// memory"), for no throughput the e2e bench could see. Off for this
/// process only; nothing else on the host changes. A kernel that refuses
/// (no THP support) leaves nothing to turn off.
fn without_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(true);
}
