//! What `configure` did (or would do): the files, a diff, and the exit status for the CLI.

use std::path::PathBuf;

use super::{ConfigVersion, EXIT_CHANGED, EXIT_UNCHANGED};

/// One file to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub path: PathBuf,
    /// Content before (None: the file did not exist).
    pub before: Option<String>,
    pub after: String,
    /// Where the old content was saved (set once written).
    pub backup: Option<PathBuf>,
}

impl FileChange {
    /// A line diff (`-` removed, `+` added), for `--dry-run` and logs.
    pub fn diff(&self) -> String {
        let before = self.before.as_deref().unwrap_or("");
        let (a, b): (Vec<&str>, Vec<&str>) =
            (before.lines().collect(), self.after.lines().collect());
        // Longest common subsequence table, from the end.
        let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for i in (0..a.len()).rev() {
            for j in (0..b.len()).rev() {
                lcs[i][j] = if a[i] == b[j] {
                    lcs[i + 1][j + 1] + 1
                } else {
                    lcs[i + 1][j].max(lcs[i][j + 1])
                };
            }
        }
        let mut out = format!(
            "--- {}{}\n+++ {}\n",
            self.path.display(),
            if self.before.is_none() {
                " (new file)"
            } else {
                ""
            },
            self.path.display()
        );
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            if i < a.len() && j < b.len() && a[i] == b[j] {
                i += 1;
                j += 1;
            } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
                out.push_str(&format!("+{}\n", b[j]));
                j += 1;
            } else {
                out.push_str(&format!("-{}\n", a[i]));
                i += 1;
            }
        }
        out
    }
}

/// The result of [`configure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigureOutcome {
    /// Files were written (or, for a dry run, would be).
    Changed {
        version: ConfigVersion,
        files: Vec<FileChange>,
        notes: Vec<String>,
        dry_run: bool,
    },
    /// Everything was already in place; nothing written.
    Unchanged { version: ConfigVersion },
}

impl ConfigureOutcome {
    /// [`EXIT_CHANGED`] or [`EXIT_UNCHANGED`].
    pub fn exit_code(&self) -> i32 {
        match self {
            ConfigureOutcome::Changed { .. } => EXIT_CHANGED,
            ConfigureOutcome::Unchanged { .. } => EXIT_UNCHANGED,
        }
    }

    /// Human summary for the CLI (stdout), ending with what to run next.
    pub fn summary(&self) -> String {
        match self {
            ConfigureOutcome::Unchanged { version } => format!(
                "containerd config (version {}) already has the gpuhook runtime; nothing changed, no restart needed\n",
                version.number()
            ),
            ConfigureOutcome::Changed { version, files, notes, dry_run } => {
                let mut s = String::new();
                for n in notes {
                    s.push_str(&format!("- {n}\n"));
                }
                for f in files {
                    if *dry_run {
                        s.push_str(&f.diff());
                    } else {
                        s.push_str(&format!("wrote {}", f.path.display()));
                        if let Some(b) = &f.backup {
                            s.push_str(&format!(" (previous content saved as {})", b.display()));
                        }
                        s.push('\n');
                    }
                }
                s.push_str(&format!(
                    "containerd config version {}. {}\n",
                    version.number(),
                    if *dry_run {
                        "Dry run: nothing was written."
                    } else {
                        "containerd was NOT restarted: run `systemctl restart containerd` to apply."
                    }
                ));
                s
            }
        }
    }
}
