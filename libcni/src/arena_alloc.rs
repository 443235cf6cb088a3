//! A global allocator for single-shot plugins: it hands out memory from a
//! fixed arena in the binary's zero-initialised data, never reuses it, and
//! past the arena's end passes requests to the system allocator.
//!
//! Why: a plugin call allocates a few hundred KiB in all and then exits.
//! musl's allocator maps a fresh page group for many small allocations and
//! unmaps it when the group empties, so a call made dozens of mmap/munmap
//! pairs and took a page fault on every page mapped again; with this
//! allocator a tuning ADD+DEL took 0.91 ms instead of 1.40 and a static
//! ADD 0.22 ms instead of 0.30 (docs/secondary-networks.md). Arena pages
//! fault once, when first touched, and go with the process. The arena is
//! bounded, so a call that allocates more (a large netlink dump, a long
//! wait loop) continues on the system allocator, which frees as usual.
//!
//! Install it in a plugin's main.rs:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: libcni::arena_alloc::ArenaAlloc = libcni::arena_alloc::ArenaAlloc::new();
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of the arena: more than a chained plugin's call allocates in all,
/// and only the pages touched count towards the process's memory.
pub const ARENA_BYTES: usize = 256 * 1024;

#[repr(C, align(4096))]
struct Arena(UnsafeCell<[u8; ARENA_BYTES]>);

pub struct ArenaAlloc {
    arena: Arena,
    /// Offset of the first byte not handed out yet; only grows.
    next: AtomicUsize,
}

// SAFETY: the arena is handed out in disjoint ranges, each claimed by one
// compare-and-swap on `next`, so no two owners share a byte.
unsafe impl Sync for ArenaAlloc {}

impl ArenaAlloc {
    pub const fn new() -> ArenaAlloc {
        ArenaAlloc {
            arena: Arena(UnsafeCell::new([0; ARENA_BYTES])),
            next: AtomicUsize::new(0),
        }
    }

    fn start(&self) -> *mut u8 {
        self.arena.0.get().cast::<u8>()
    }

    /// The offset of `ptr` in the arena, when it points into it.
    fn offset_of(&self, ptr: *mut u8) -> Option<usize> {
        let offset = (ptr as usize).checked_sub(self.start() as usize)?;
        (offset < ARENA_BYTES).then_some(offset)
    }

    /// Claims `size` bytes aligned to `align` (a power of two), or `None`
    /// when the arena has no room left for them.
    fn claim(&self, size: usize, align: usize) -> Option<*mut u8> {
        let base = self.start() as usize;
        let mut next = self.next.load(Ordering::Relaxed);
        loop {
            let aligned = base.checked_add(next)?.checked_add(align - 1)? & !(align - 1);
            let offset = aligned - base;
            let end = offset.checked_add(size)?;
            if end > ARENA_BYTES {
                return None;
            }
            match self
                .next
                .compare_exchange_weak(next, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(self.start().wrapping_add(offset)),
                Err(now) => next = now,
            }
        }
    }

    /// Bytes of the arena handed out so far.
    pub fn used(&self) -> usize {
        self.next.load(Ordering::Relaxed)
    }
}

impl Default for ArenaAlloc {
    fn default() -> Self {
        ArenaAlloc::new()
    }
}

// SAFETY: each pointer handed out is either a fresh range of the arena,
// disjoint from every other and aligned as asked, or the system
// allocator's; `dealloc` and `realloc` tell the two apart by address.
unsafe impl GlobalAlloc for ArenaAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.claim(layout.size(), layout.align()) {
            Some(ptr) => ptr,
            // SAFETY: the caller's layout, passed on.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Arena memory is not reused: the process ends soon.
        if self.offset_of(ptr).is_none() {
            // SAFETY: not the arena's, so the system allocator's block,
            // with the layout it was allocated with.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(offset) = self.offset_of(ptr) else {
            // SAFETY: the system allocator's block, as the caller gave it.
            return unsafe { System.realloc(ptr, layout, new_size) };
        };
        if new_size <= layout.size() {
            return ptr;
        }
        // The block handed out last grows in place (a Vec or String being
        // filled), so growing one does not leave copies behind.
        let old_end = offset + layout.size();
        if let Some(new_end) = offset.checked_add(new_size) {
            if new_end <= ARENA_BYTES
                && self
                    .next
                    .compare_exchange(old_end, new_end, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                return ptr;
            }
        }
        // SAFETY: new_size is non-zero and, as realloc's caller guarantees,
        // does not overflow isize when rounded up to the alignment.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a layout of non-zero size.
        let moved = unsafe { self.alloc(new_layout) };
        if !moved.is_null() {
            // SAFETY: both blocks hold at least layout.size() bytes and do
            // not overlap (the new one is fresh).
            unsafe { std::ptr::copy_nonoverlapping(ptr, moved, layout.size()) };
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static ARENA: ArenaAlloc = ArenaAlloc::new();

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    /// One test, because the arena is shared and only grows.
    #[test]
    fn claims_aligned_disjoint_blocks_grows_the_last_in_place_then_falls_back() {
        // SAFETY (whole test): every block is used within its layout and
        // given back with the layout it was allocated with.
        unsafe {
            let a = ARENA.alloc(layout(3, 1));
            let b = ARENA.alloc(layout(16, 64));
            assert_eq!(b as usize % 64, 0);
            assert!(b as usize >= a as usize + 3);
            b.write_bytes(0xab, 16);

            // b is the newest block: it grows where it is, keeping its bytes.
            let grown = ARENA.realloc(b, layout(16, 64), 100);
            assert_eq!(grown, b);
            assert_eq!(*grown.add(15), 0xab);

            // a is not: it moves, with its bytes.
            a.write_bytes(7, 3);
            let moved = ARENA.realloc(a, layout(3, 1), 10);
            assert_ne!(moved, a);
            assert_eq!(std::slice::from_raw_parts(moved, 3), &[7, 7, 7]);

            // Past the arena: the system allocator's block, freed by it.
            let big = ARENA.alloc(layout(ARENA_BYTES, 8));
            assert!(!big.is_null());
            assert!(ARENA.offset_of(big).is_none());
            big.write_bytes(1, ARENA_BYTES);
            let bigger = ARENA.realloc(big, layout(ARENA_BYTES, 8), ARENA_BYTES * 2);
            assert_eq!(*bigger.add(ARENA_BYTES - 1), 1);
            ARENA.dealloc(bigger, layout(ARENA_BYTES * 2, 8));

            // Filling the rest of the arena, then one more block.
            let used = ARENA.used();
            let rest = ARENA.alloc(layout(ARENA_BYTES - used, 1));
            assert!(ARENA.offset_of(rest).is_some());
            let after = ARENA.alloc(layout(8, 8));
            assert!(ARENA.offset_of(after).is_none());
            ARENA.dealloc(after, layout(8, 8));
            ARENA.dealloc(rest, layout(ARENA_BYTES - used, 1));
        }
    }
}
