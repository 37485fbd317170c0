//! Gives freed heap memory back to the system. glibc's allocator keeps what a process freed inside its heap and
//! returns only the top of it, so after a thousand registries come and go (or a crowded namespace's Services stop
//! being watched) the process would stay as large as at its peak. `malloc_trim` hands every free page back.

/// Returns free heap pages to the system; a no-op where the C library is not glibc.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: malloc_trim takes no pointers and only releases pages that glibc's allocator itself holds free; it
    // is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
