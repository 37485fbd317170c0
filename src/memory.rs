//! Gives freed heap memory back to the system. glibc's allocator keeps what a process freed inside its heap and
//! returns only the top of it, so after a thousand registries come and go (or a crowded namespace's Services stop
//! being watched) the process would stay as large as at its peak. `malloc_trim` hands every free page back, and one
//! arena for all threads keeps freed memory in one heap instead of scattered over one arena per thread.
//!
//! These are the crate's only unsafe calls. Elsewhere than glibc both are no-ops.

/// Makes every thread allocate from the main arena: with the runtime's threads (its blocking pool's too) each in an
/// arena of its own, memory freed by one stayed spread over several heaps (`make bench`: 13.7 MiB after a thousand
/// registries went, 12.2 MiB with one arena). Call it before starting threads.
pub fn use_one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: mallopt takes no pointers; M_ARENA_MAX only limits how many arenas glibc creates from now on.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Free heap worth giving back. A trim pauses the one runtime thread while it walks the heap and returns pages
/// (`make bench` saw watch events wait behind it); what a pass or two leaves free is not worth that pause, what
/// a thousand registries leave when they go is.
pub const WORTH_RETURNING: usize = 256 * 1024;

/// Returns free heap pages to the system when at least [`WORTH_RETURNING`] bytes are free; returns whether it did.
pub fn release_free_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: mallinfo2 and malloc_trim take no pointers; mallinfo2 only reads the allocator's counters and
    // malloc_trim only releases pages that glibc's allocator itself holds free. Both are safe from any thread.
    unsafe {
        if libc::mallinfo2().fordblks < WORTH_RETURNING {
            return false;
        }
        libc::malloc_trim(0);
        return true;
    }
    #[allow(unreachable_code)]
    false
}
