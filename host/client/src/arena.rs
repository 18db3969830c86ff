//! The client's allocator: a bump arena in `.bss`, the system's allocator
//! beyond it.
//!
//! The client lives for one call and allocates a few tens of kilobytes
//! (the environment, stdin, the request and the answer). musl's allocator
//! serves small sizes from groups it maps and unmaps one at a time: twelve
//! `mmap`/`munmap` per call, and each new page faulted twice, once read and
//! once written (host/bench/results/findings.md, issue 21 fourteenth part).
//! Memory handed out from one static array instead is faulted in once per
//! page and never given back: a process this short has nothing to reuse
//! it for. What does not fit goes to the system's allocator, so a large
//! answer costs what it did before, no more.
//!
//! Freeing gives back only the newest block (the usual case: a vector that
//! grows, a temporary string), so a vector grown step by step stays one
//! block that is extended in place.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `N` bytes handed out in order; beyond them, [`System`].
pub struct Arena<const N: usize> {
    mem: UnsafeCell<[u8; N]>,
    /// Offset of the first byte not handed out.
    next: AtomicUsize,
}

// SAFETY: the bytes of `mem` are handed out in disjoint blocks, claimed by
// compare-and-swap on `next`; the arena itself never reads or writes them.
unsafe impl<const N: usize> Sync for Arena<N> {}

impl<const N: usize> Arena<N> {
    pub const fn new() -> Self {
        Arena {
            mem: UnsafeCell::new([0; N]),
            next: AtomicUsize::new(0),
        }
    }

    fn base(&self) -> usize {
        self.mem.get() as usize
    }

    /// Whether `ptr` was handed out by the arena rather than the system.
    fn owns(&self, ptr: *mut u8) -> bool {
        let p = ptr as usize;
        p >= self.base() && p < self.base() + N
    }

    /// Claim `size` bytes aligned to `align`, or None when they do not fit.
    fn claim(&self, size: usize, align: usize) -> Option<*mut u8> {
        let base = self.base();
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            // `align` is a power of two (Layout's promise).
            let start = (base + cur).checked_add(align - 1)? & !(align - 1);
            let end = (start - base).checked_add(size)?;
            if end > N {
                return None;
            }
            match self
                .next
                .compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                // In bounds: `start - base + size <= N`.
                Ok(_) => return Some(start as *mut u8),
                Err(now) => cur = now,
            }
        }
    }

    /// Move the end of the newest block, if `ptr` starts it, from
    /// `ptr + old` to `ptr + new`; whether it moved.
    fn resize_last(&self, ptr: *mut u8, old: usize, new: usize) -> bool {
        let at = ptr as usize - self.base();
        let (Some(old_end), Some(new_end)) = (at.checked_add(old), at.checked_add(new)) else {
            return false;
        };
        new_end <= N
            && self
                .next
                .compare_exchange(old_end, new_end, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

impl<const N: usize> Default for Arena<N> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: blocks from `claim` are in bounds, aligned as asked and disjoint
// from every block still live (only the newest block's end ever moves back,
// and only when that block is the one freed or resized); everything else is
// the system allocator's, called with the layouts it handed out.
unsafe impl<const N: usize> GlobalAlloc for Arena<N> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.claim(layout.size(), layout.align()) {
            Some(p) => p,
            // SAFETY: the caller's layout, passed on.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if self.owns(ptr) {
            self.resize_last(ptr, layout.size(), 0);
        } else {
            // SAFETY: not the arena's, so the system's, with its layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !self.owns(ptr) {
            // SAFETY: the system's block, with its layout.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // The newest block moves its end; any other keeps its place when
        // it shrinks (its tail is never handed out again).
        if self.resize_last(ptr, layout.size(), new_size) || new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: `new_size` with the block's alignment is a valid layout
        // (GlobalAlloc::realloc's contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid layout.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live, disjoint and at least this long.
            unsafe { std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
            // SAFETY: the old block, with its layout.
            unsafe { self.dealloc(ptr, layout) };
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn blocks_are_aligned_disjoint_and_beyond_the_arena_the_systems() {
        let a: Box<Arena<256>> = Box::default();
        let mut blocks = Vec::new();
        for (size, align) in [(3, 1), (8, 8), (5, 2), (16, 16), (1, 64), (40, 8)] {
            let l = layout(size, align);
            // SAFETY: a valid layout; each block is filled and freed below.
            let p = unsafe { a.alloc(l) };
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0, "aligned to {align}");
            assert!(a.owns(p), "{size} bytes fit in the arena");
            // SAFETY: the block is `size` bytes long.
            unsafe { std::ptr::write_bytes(p, blocks.len() as u8 + 1, size) };
            blocks.push((p, l));
        }
        for (i, (p, l)) in blocks.iter().enumerate() {
            // SAFETY: live blocks; none was overwritten by another's fill.
            let bytes = unsafe { std::slice::from_raw_parts(*p, l.size()) };
            assert!(bytes.iter().all(|b| *b == i as u8 + 1), "block {i} intact");
        }
        // More than is left: the system's, and freed there.
        let big = layout(1024, 8);
        // SAFETY: a valid layout, freed with it.
        let p = unsafe { a.alloc(big) };
        assert!(!p.is_null() && !a.owns(p));
        // SAFETY: the system's block.
        unsafe { a.dealloc(p, big) };
    }

    #[test]
    fn the_newest_block_grows_in_place_and_is_given_back() {
        let a: Box<Arena<128>> = Box::default();
        let l = layout(16, 8);
        // SAFETY: valid layouts throughout; blocks used within their sizes.
        unsafe {
            let p = a.alloc(l);
            std::ptr::write_bytes(p, 7, 16);
            let q = a.realloc(p, l, 48);
            assert_eq!(p, q, "the newest block grows where it is");
            assert_eq!(a.next.load(Ordering::Relaxed), 48);
            let r = a.alloc(layout(8, 8));
            assert!(a.owns(r));
            // No longer the newest: growing it moves it, contents kept.
            let q2 = a.realloc(q, layout(48, 8), 64);
            assert_ne!(q2, q);
            assert!(a.owns(q2));
            assert!(std::slice::from_raw_parts(q2, 16).iter().all(|b| *b == 7));
            // Shrunk, a block that is not the newest stays where it is.
            assert_eq!(a.realloc(r, layout(8, 8), 4), r);
            // Freeing the newest gives its bytes back; an older one stays.
            let before = a.next.load(Ordering::Relaxed);
            a.dealloc(q2, layout(64, 8));
            assert_eq!(a.next.load(Ordering::Relaxed), before - 64);
            let mark = a.next.load(Ordering::Relaxed);
            a.dealloc(p, layout(48, 8));
            assert_eq!(a.next.load(Ordering::Relaxed), mark);
            // Grown past the arena's end: moved to the system, contents kept.
            let s = a.alloc(layout(8, 8));
            std::ptr::write_bytes(s, 9, 8);
            let t = a.realloc(s, layout(8, 8), 4096);
            assert!(!t.is_null() && !a.owns(t));
            assert!(std::slice::from_raw_parts(t, 8).iter().all(|b| *b == 9));
            a.dealloc(t, layout(4096, 8));
        }
    }

    #[test]
    fn threads_never_share_a_block() {
        let a: Box<Arena<{ 64 << 10 }>> = Box::default();
        let a = &*a;
        std::thread::scope(|s| {
            for t in 0..4u8 {
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for _ in 0..200 {
                        let l = layout(24, 8);
                        // SAFETY: a valid layout; filled within its size.
                        let p = unsafe { a.alloc(l) };
                        assert!(!p.is_null());
                        // SAFETY: 24 bytes long.
                        unsafe { std::ptr::write_bytes(p, t + 1, 24) };
                        mine.push(p);
                    }
                    for p in mine {
                        // SAFETY: live; only this thread wrote it.
                        let b = unsafe { std::slice::from_raw_parts(p, 24) };
                        assert!(b.iter().all(|x| *x == t + 1), "thread {t}'s block intact");
                    }
                });
            }
        });
    }
}
