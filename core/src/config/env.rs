//! The machinery of the registry: a variable's declaration ([`Var`]), the types a value may
//! have ([`Value`]), where values come from ([`Env`]) and the one policy for a bad value
//! (NCCL's: warn once per variable, naming it and the value, and use the default).

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// When a variable is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Once per process (the first use caches it; later changes are not seen).
    Process,
    /// At every communicator init (or every use), so a process may change it between them.
    Comm,
}

impl Scope {
    /// How the scope is written in the documentation.
    pub fn describe(self) -> &'static str {
        match self {
            Scope::Process => "process",
            Scope::Comm => "communicator",
        }
    }
}

/// The type of a variable's value: how its text is read and shown.
pub trait Value: Clone + Send + Sync + 'static {
    /// What a valid value looks like, for the warning about a bad one.
    const EXPECTED: &'static str;
    /// Whether an empty (or blank) value counts as unset, as in NCCL (not for text values).
    const EMPTY_IS_UNSET: bool = true;
    /// The value `raw` spells, or `None` when it is not one.
    fn parse(raw: &str) -> Option<Self>;
    /// As [`Value::parse`], from the operating system's text (paths need not be UTF-8).
    fn parse_os(raw: &OsStr) -> Option<Self> {
        Self::parse(raw.to_str()?)
    }
    /// The value as the documentation writes it.
    fn show(&self) -> String;
}

/// A switch, as NCCL's: `0` or `1`.
impl Value for bool {
    const EXPECTED: &'static str = "0 or 1";
    fn parse(raw: &str) -> Option<bool> {
        match raw.trim() {
            "1" => Some(true),
            "0" => Some(false),
            _ => None,
        }
    }
    fn show(&self) -> String {
        u8::from(*self).to_string()
    }
}

/// A switch that also takes words: `1`, `true`, `yes`, `on`, or `0`, `false`, `no`, `off`
/// (the spellings the watchdog's switches have always taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag(pub bool);

impl Value for Flag {
    const EXPECTED: &'static str = "1, true, yes, on, or 0, false, no, off";
    fn parse(raw: &str) -> Option<Flag> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Some(Flag(true)),
            "0" | "false" | "no" | "off" => Some(Flag(false)),
            _ => None,
        }
    }
    fn show(&self) -> String {
        self.0.show()
    }
}

macro_rules! integer_value {
    ($($t:ty: $expected:literal),*) => {$(
        impl Value for $t {
            const EXPECTED: &'static str = $expected;
            fn parse(raw: &str) -> Option<$t> {
                raw.trim().parse().ok()
            }
            fn show(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
integer_value!(u16: "an integer from 0 to 65535", u32: "a non-negative integer",
    u64: "a non-negative integer", usize: "a non-negative integer", i64: "an integer");

/// Seconds, fractions allowed.
impl Value for Duration {
    const EXPECTED: &'static str = "a number of seconds";
    fn parse(raw: &str) -> Option<Duration> {
        let s: f64 = raw.trim().parse().ok()?;
        (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s))
    }
    fn show(&self) -> String {
        format!("{}", self.as_secs_f64())
    }
}

/// Text, kept as written (blanks included; an empty value is a value).
impl Value for String {
    const EXPECTED: &'static str = "text";
    const EMPTY_IS_UNSET: bool = false;
    fn parse(raw: &str) -> Option<String> {
        Some(raw.to_string())
    }
    fn show(&self) -> String {
        self.clone()
    }
}

/// A path (an empty value is unset).
impl Value for PathBuf {
    const EXPECTED: &'static str = "a path";
    fn parse(raw: &str) -> Option<PathBuf> {
        Some(PathBuf::from(raw))
    }
    fn parse_os(raw: &OsStr) -> Option<PathBuf> {
        Some(PathBuf::from(raw))
    }
    fn show(&self) -> String {
        self.display().to_string()
    }
}

/// A value that may be absent: `None` is the default "unset" (or "automatic").
impl<T: Value> Value for Option<T> {
    const EXPECTED: &'static str = T::EXPECTED;
    const EMPTY_IS_UNSET: bool = T::EMPTY_IS_UNSET;
    fn parse(raw: &str) -> Option<Option<T>> {
        T::parse(raw).map(Some)
    }
    fn parse_os(raw: &OsStr) -> Option<Option<T>> {
        T::parse_os(raw).map(Some)
    }
    fn show(&self) -> String {
        self.as_ref().map_or_else(|| "unset".to_string(), T::show)
    }
}

/// One environment variable: its name, type (`T`), default, scope and a line of documentation.
pub struct Var<T: 'static> {
    /// The variable's name.
    pub name: &'static str,
    /// The value when the variable is unset or bad.
    pub default: T,
    /// When it is read.
    pub scope: Scope,
    /// One line of documentation.
    pub doc: &'static str,
    /// A hook for tests, not a setting for users.
    pub test_hook: bool,
    /// Values of the type that are still bad (out of range), with the text saying which are good.
    valid: Option<(Check<T>, &'static str)>,
}

/// Whether a parsed value is good.
type Check<T> = fn(&T) -> bool;

/// A function giving variables' values (`None`: unset).
type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

impl<T: Value> Var<T> {
    /// A variable with these properties.
    pub const fn new(name: &'static str, default: T, scope: Scope, doc: &'static str) -> Var<T> {
        Var {
            name,
            default,
            scope,
            doc,
            test_hook: false,
            valid: None,
        }
    }

    /// Marks a hook for tests.
    pub const fn hook(mut self) -> Var<T> {
        self.test_hook = true;
        self
    }

    /// Only values `ok` accepts are good; `expected` says which in the warning.
    pub const fn valid(mut self, ok: Check<T>, expected: &'static str) -> Var<T> {
        self.valid = Some((ok, expected));
        self
    }

    /// The value of `raw` (the variable's text, `None`: unset) under the bad-value policy:
    /// `None` when unset (or empty, for non-text types), the value when good, and `None` after
    /// a warning (once per variable) when bad.
    pub fn read(&self, raw: Option<&OsStr>) -> Option<T> {
        let raw = raw?;
        if T::EMPTY_IS_UNSET && raw.to_string_lossy().trim().is_empty() {
            return None;
        }
        let parsed = T::parse_os(raw);
        let (good, expected) = match (&parsed, self.valid) {
            (None, _) => (false, self.valid.map_or(T::EXPECTED, |(_, e)| e)),
            (Some(v), Some((ok, e))) => (ok(v), e),
            (Some(_), None) => (true, T::EXPECTED),
        };
        if good {
            parsed
        } else {
            bad_value(
                self.name,
                &raw.to_string_lossy(),
                expected,
                &self.default.show(),
            );
            None
        }
    }
}

/// What the registry lists of every variable, whatever its type.
pub trait Entry: Sync {
    /// The variable's name.
    fn name(&self) -> &'static str;
    /// What a good value looks like.
    fn expected(&self) -> &'static str;
    /// The default, as text.
    fn default_text(&self) -> String;
    /// When it is read.
    fn scope(&self) -> Scope;
    /// One line of documentation.
    fn doc(&self) -> &'static str;
    /// Whether it is a hook for tests.
    fn test_hook(&self) -> bool;
}

impl<T: Value> Entry for Var<T> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn expected(&self) -> &'static str {
        self.valid.map_or(T::EXPECTED, |(_, e)| e)
    }
    fn default_text(&self) -> String {
        self.default.show()
    }
    fn scope(&self) -> Scope {
        self.scope
    }
    fn doc(&self) -> &'static str {
        self.doc
    }
    fn test_hook(&self) -> bool {
        self.test_hook
    }
}

/// Where values come from: the process environment, or a lookup function (tests).
#[derive(Clone, Copy)]
pub struct Env<'a> {
    lookup: Option<Lookup<'a>>,
}

impl Env<'static> {
    /// The process environment.
    pub const PROCESS: Env<'static> = Env { lookup: None };
}

impl<'a> Env<'a> {
    /// Values as `lookup` gives them (`None`: unset).
    pub fn from_fn(lookup: Lookup<'a>) -> Env<'a> {
        Env {
            lookup: Some(lookup),
        }
    }

    fn raw(&self, name: &str) -> Option<OsString> {
        match self.lookup {
            // The only place the workspace reads its environment variables: through an
            // environment plugin where one is loaded (NCCL_ENV_PLUGIN), as NCCL does.
            None => super::env_plugin::get(name).unwrap_or_else(|()| std::env::var_os(name)),
            Some(f) => f(name).map(OsString::from),
        }
    }

    /// The variable's value, or its default when unset or bad (warned once).
    pub fn get<T: Value>(&self, var: &Var<T>) -> T {
        self.get_set(var).unwrap_or_else(|| var.default.clone())
    }

    /// The variable's value when it is set to a good one; `None` when unset, or bad (warned
    /// once), for callers whose default is not a constant.
    pub fn get_set<T: Value>(&self, var: &Var<T>) -> Option<T> {
        var.read(self.raw(var.name).as_deref())
    }

    /// Whether the variable is present at all (even empty or bad).
    pub fn is_set<T: Value>(&self, var: &Var<T>) -> bool {
        self.raw(var.name).is_some()
    }
}

/// The variable's value in this process, or its default when unset or bad (warned once).
pub fn get<T: Value>(var: &Var<T>) -> T {
    Env::PROCESS.get(var)
}

/// The variable's value in this process when it is set to a good one (see [`Env::get_set`]).
pub fn get_set<T: Value>(var: &Var<T>) -> Option<T> {
    Env::PROCESS.get_set(var)
}

/// Whether the variable is present in this process's environment (even empty or bad).
pub fn is_set<T: Value>(var: &Var<T>) -> bool {
    Env::PROCESS.is_set(var)
}

/// The policy for a bad value, for the registry and for variables whose values a module
/// parses itself (lists, levels): a warning naming the variable, its value, what was expected
/// and what is used instead, once per variable and process.
pub fn bad_value(name: &str, value: &str, expected: &str, using: &str) {
    static WARNED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned.iter().any(|w| w == name) {
        return;
    }
    warned.push(name.to_string());
    drop(warned);
    tracing::warn!(target: "oxccl::config", "{name}={value:?} is not {expected}; using {using}");
}
