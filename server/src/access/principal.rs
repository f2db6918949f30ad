//! Who a verified caller is: the bootstrap admin or a user (an administrator or not), and the
//! token family their credential belongs to. Plain data; imports nothing from the crate.

/// A verified caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Name written as the author of what this caller appends (`user:<name>`).
    pub name: String,
    /// An administrator (the bootstrap admin, or a user made one): owner of every session, may
    /// manage users.
    pub admin: bool,
    /// The bootstrap admin token: no account behind it, so nothing to revoke but the token.
    pub bootstrap: bool,
    /// The token family (login or device) a user's access token belongs to.
    pub family: Option<String>,
    /// A host credential's machine: the caller may only register that machine and act on its
    /// log and the sessions it was asked to start (`access::host`).
    pub machine: Option<String>,
}

impl Principal {
    /// The bootstrap admin.
    pub fn bootstrap() -> Self {
        Self {
            name: "admin".to_owned(),
            admin: true,
            bootstrap: true,
            family: None,
            machine: None,
        }
    }

    /// A user, with the token family their credential belongs to.
    pub fn for_user(name: String, family: Option<String>) -> Self {
        Self {
            name,
            admin: false,
            bootstrap: false,
            family,
            machine: None,
        }
    }

    /// Limits this caller to machine `machine` (a host credential).
    pub fn for_machine(mut self, machine: Option<String>) -> Self {
        self.machine = machine;
        self
    }

    /// Makes this user an administrator.
    pub fn as_admin(mut self, admin: bool) -> Self {
        self.admin = admin;
        self
    }

    /// The user name, unless this is the bootstrap admin (administrators are users too: their
    /// revocation ends their connections like anyone's).
    pub fn user(&self) -> Option<&str> {
        (!self.bootstrap).then_some(self.name.as_str())
    }

    /// The `author` of entries this caller writes.
    pub fn author(&self) -> String {
        format!("user:{}", self.name)
    }
}
