//! Shrinking a failing list of operations: the smallest part of it that still fails, within a
//! bound on the number of tries, since each try replays the operations on the stack. First
//! every operation on one subject (an object, a policy, ...) is dropped at once, which keeps
//! what is left consistent; then chunks of halving size (delta debugging).

/// The search: the smallest failing part so far, how it failed, and the tries made.
struct Search<T, R, F> {
    current: Vec<T>,
    failure: Option<R>,
    tries: usize,
    budget: usize,
    fails: F,
}

impl<T: Clone, R, F, Fut> Search<T, R, F>
where
    F: FnMut(Vec<T>) -> Fut,
    Fut: Future<Output = Option<R>>,
{
    /// Tries `candidate`: whether it fails (and is kept), `None` once the budget is spent. The
    /// empty list is never tried.
    async fn attempt(&mut self, candidate: Vec<T>) -> Option<bool> {
        if candidate.is_empty() {
            return Some(false);
        }
        if self.tries == self.budget {
            return None;
        }
        self.tries += 1;
        let failure = (self.fails)(candidate.clone()).await;
        let failed = failure.is_some();
        if failed {
            self.current = candidate;
            self.failure = failure;
        }
        Some(failed)
    }

    /// Drops what each subject is about at once, in the order subjects first appear.
    async fn by_subject<K: PartialEq>(&mut self, subject: impl Fn(&T) -> K) -> Option<()> {
        let mut subjects: Vec<K> = Vec::new();
        for item in &self.current {
            let about = subject(item);
            if !subjects.contains(&about) {
                subjects.push(about);
            }
        }
        for about in subjects {
            let candidate = self.current.iter().filter(|i| subject(i) != about).cloned().collect();
            self.attempt(candidate).await?;
        }
        Some(())
    }

    /// Drops chunks of halving size, until no single item can go.
    async fn by_chunk(&mut self) -> Option<()> {
        let mut chunk = self.current.len().div_ceil(2).max(1);
        loop {
            let mut dropped = false;
            let mut start = 0;
            while start < self.current.len() {
                let end = (start + chunk).min(self.current.len());
                let candidate = self.current[..start]
                    .iter()
                    .chain(&self.current[end..])
                    .cloned()
                    .collect();
                if self.attempt(candidate).await? {
                    dropped = true;
                } else {
                    start = end;
                }
            }
            match chunk {
                1 if !dropped => return Some(()),
                1 => {}
                _ => chunk = chunk.div_ceil(2),
            }
        }
    }
}

/// A part of `items` that still fails, as small as `budget` tries find: `fails` answers how a
/// part fails, if it does (`items` itself is assumed to); `subject` tells what an item is about.
/// Returns the part, how the last part found failed, and the tries made.
pub async fn shrink<T, K, R, F, Fut>(
    items: Vec<T>,
    budget: usize,
    subject: impl Fn(&T) -> K,
    fails: F,
) -> (Vec<T>, Option<R>, usize)
where
    T: Clone,
    K: PartialEq,
    F: FnMut(Vec<T>) -> Fut,
    Fut: Future<Output = Option<R>>,
{
    let mut search = Search {
        current: items,
        failure: None,
        tries: 0,
        budget,
        fails,
    };
    if search.by_subject(subject).await.is_some() {
        search.by_chunk().await;
    }
    (search.current, search.failure, search.tries)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shrinks 0..n, whose subjects are their tens.
    fn shrunk(n: u32, budget: usize, fails: impl Fn(&[u32]) -> bool) -> (Vec<u32>, usize) {
        let fails = |items: Vec<u32>| std::future::ready(fails(&items).then_some(items.len()));
        let shrinking = shrink((0..n).collect(), budget, |i| i / 10, fails);
        let (items, failure, tries) = futures::executor::block_on(shrinking);
        assert_eq!(failure.is_some(), items.len() < n as usize, "how the last part failed");
        (items, tries)
    }

    #[test]
    fn shrinks_to_the_operations_that_fail_together() {
        let (items, tries) = shrunk(40, 100, |items| items.contains(&3) && items.contains(&31));
        assert_eq!(items, [3, 31]);
        assert!(tries <= 40, "{tries} tries");
    }

    #[test]
    fn keeps_order_and_needs_every_part() {
        // Fails when 5 comes before 9 and there are at least 3 items.
        let fails = |items: &[u32]| {
            let at = |x| items.iter().position(|i| *i == x);
            items.len() >= 3 && matches!((at(5), at(9)), (Some(a), Some(b)) if a < b)
        };
        let (items, _) = shrunk(16, 100, fails);
        assert_eq!(items.len(), 3);
        assert!(fails(&items));
    }

    #[test]
    fn drops_whole_subjects_first() {
        // Fails while some item of the twenties is there: one try drops every other subject.
        let mut tried = Vec::new();
        let fails = |items: Vec<u32>| {
            tried.push(items.len());
            std::future::ready(items.iter().any(|i| (20..30).contains(i)).then_some(()))
        };
        let (items, _, _) = futures::executor::block_on(shrink((0..40).collect(), 4, |i| i / 10, fails));
        assert_eq!(items, (20..30).collect::<Vec<_>>());
        assert_eq!(tried, [30, 20, 10, 10], "the twenties stay, each other ten goes");
    }

    #[test]
    fn stops_at_the_budget() {
        let (items, tries) = shrunk(64, 5, |items| items.contains(&60));
        assert_eq!(tries, 5);
        assert!(items.contains(&60) && items.len() < 64);
    }

    #[test]
    fn the_same_failure_shrinks_the_same_way() {
        let fails = |items: &[u32]| items.iter().filter(|i| *i % 7 == 0).count() >= 2;
        assert_eq!(shrunk(50, 30, fails), shrunk(50, 30, fails));
    }
}
