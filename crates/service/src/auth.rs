//! Clients, roles and the credentials the server signs: what authentication consults on
//! every request, held in memory and rebuilt when clients or roles change (here, or on
//! another server sharing the database: its generation moves on).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use shoal_engine::auth::client::{Client, ClientChange, Role, RoleInput};
use shoal_engine::auth::{
    KnownClient, QUEUE_CLIENT_ID, ROOT_CLIENT_ID, Roles, ScopeSet, certificate, expand_with_anonymous,
};
use shoal_engine::{TaskId, Timestamp};
use shoal_store::operation::{ChangeAuth, SigningToken};
use shoal_store::{AuthChange, AuthOutcome, ClientEdit, Store, StoreError};

use crate::clock::now;

/// How often a server looks whether another changed clients or roles.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// A fresh secret: 44 characters of base64url (264 random bits, as long as Taskcluster's
/// two slugids), from the system's random source.
#[must_use]
pub fn new_secret() -> String {
    use base64::Engine;
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 33];
    // The system's random source does not fail once the system is up; if it did, two
    // slugids (also random) stand in.
    match ring::rand::SystemRandom::new().fill(&mut bytes) {
        Ok(()) => base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
        Err(_) => format!("{}{}", slugid::v4(), slugid::v4()),
    }
}

/// What authentication holds at one moment.
#[derive(Debug, Default)]
pub struct AuthState {
    /// The generation of clients and roles it was built from.
    pub generation: i64,
    /// Every client that can sign requests, by id, with its expanded scopes.
    pub clients: HashMap<String, KnownClient>,
    /// The stored clients, by id.
    pub stored: BTreeMap<String, Client>,
    /// The stored roles, by id.
    pub roles: BTreeMap<String, Role>,
    /// The roles, ready to expand scopes.
    pub expander: Roles,
    /// What anonymous callers hold.
    pub anonymous: Arc<ScopeSet>,
}

/// The clients, roles and signing keys of this server; cheap to clone.
#[derive(Clone)]
pub struct Authority {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    root_token: String,
    signing_token: String,
    state: RwLock<Arc<AuthState>>,
}

/// Credentials signed by the server for one run of a task.
#[derive(Debug, Clone)]
pub struct RunCredentials {
    /// The client id they are presented under.
    pub client_id: String,
    /// Their key.
    pub access_token: String,
    /// The certificate, as JSON text (Taskcluster's clients take it so).
    pub certificate: String,
}

impl Authority {
    /// Loads clients and roles from `store`, with the root client's token `root_token`.
    ///
    /// # Errors
    /// When the store cannot be read.
    pub async fn open(store: Store, root_token: String) -> Result<Authority, StoreError> {
        let signing_token = store.run(SigningToken { candidate: new_secret() }, now()).await?.value;
        let inner = Inner { store, root_token, signing_token, state: RwLock::new(Arc::default()) };
        let authority = Authority { inner: Arc::new(inner) };
        authority.reload().await?;
        Ok(authority)
    }

    /// What authentication holds now.
    #[must_use]
    pub fn current(&self) -> Arc<AuthState> {
        Arc::clone(&self.inner.state.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Rebuilds the state from the store.
    async fn reload(&self) -> Result<(), StoreError> {
        let snapshot = self.inner.store.read(|reads| reads.auth_snapshot()).await?;
        let expander = Roles::new(snapshot.roles.iter().map(|role| (role.role_id.clone(), role.scopes.clone())));
        let everything = Arc::new(ScopeSet::new(["*".to_owned()]));
        let mut clients = HashMap::with_capacity(snapshot.clients.len() + 2);
        for client in &snapshot.clients {
            let known = KnownClient {
                access_token: client.access_token.clone(),
                scopes: Arc::new(expand_with_anonymous(&expander, client.scopes.iter().cloned())),
                expires: client.expires.millis(),
                disabled: client.disabled,
            };
            clients.insert(client.client_id.clone(), known);
        }
        for (client_id, token) in
            [(ROOT_CLIENT_ID, &self.inner.root_token), (QUEUE_CLIENT_ID, &self.inner.signing_token)]
        {
            let known = KnownClient {
                access_token: token.clone(),
                scopes: everything.clone(),
                expires: i64::MAX,
                disabled: false,
            };
            clients.insert(client_id.to_owned(), known);
        }
        let anonymous = Arc::new(expand_with_anonymous(&expander, std::iter::empty()));
        let state = AuthState {
            generation: snapshot.generation,
            clients,
            stored: snapshot.clients.into_iter().map(|client| (client.client_id.clone(), client)).collect(),
            roles: snapshot.roles.into_iter().map(|role| (role.role_id.clone(), role)).collect(),
            expander,
            anonymous,
        };
        *self.inner.state.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(state);
        Ok(())
    }

    /// Reloads when another server changed clients or roles.
    ///
    /// # Errors
    /// When the store cannot be read.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let generation = self.inner.store.read(|reads| reads.auth_generation()).await?;
        if generation != self.current().generation {
            self.reload().await?;
        }
        Ok(())
    }

    async fn change(&self, change: AuthChange) -> Result<AuthOutcome, StoreError> {
        let outcome = self.inner.store.run(ChangeAuth { change }, now()).await?.value;
        self.reload().await?;
        Ok(outcome)
    }

    /// Creates a client with a new access token; answers it with the token.
    ///
    /// # Errors
    /// Conflict when the id is taken.
    pub async fn create_client(&self, client_id: String, change: ClientChange) -> Result<Client, StoreError> {
        let at = now();
        let client = Client {
            client_id,
            access_token: new_secret(),
            description: change.description,
            scopes: change.scopes.unwrap_or_default(),
            expires: change.expires,
            disabled: false,
            delete_on_expiration: change.delete_on_expiration.unwrap_or(false),
            created: at,
            last_modified: at,
            last_rotated: at,
        };
        expect_client(self.change(AuthChange::CreateClient(client)).await?)
    }

    /// Changes a client.
    ///
    /// # Errors
    /// NotFound when there is no such client.
    pub async fn update_client(&self, client_id: String, edit: ClientEdit) -> Result<Client, StoreError> {
        expect_client(self.change(AuthChange::UpdateClient(client_id, edit)).await?)
    }

    /// Deletes a client (nothing when there is none).
    ///
    /// # Errors
    /// Storage failure.
    pub async fn delete_client(&self, client_id: String) -> Result<(), StoreError> {
        self.change(AuthChange::DeleteClient(client_id)).await.map(drop)
    }

    /// Creates (`create`) or updates a role.
    ///
    /// # Errors
    /// Conflict when creating a taken id, NotFound when updating a missing one, Invalid when
    /// the roles would expand without end.
    pub async fn put_role(&self, role_id: String, input: RoleInput, create: bool) -> Result<Role, StoreError> {
        let at = now();
        let role =
            Role { role_id, scopes: input.scopes, description: input.description, created: at, last_modified: at };
        let change = if create { AuthChange::CreateRole(role) } else { AuthChange::UpdateRole(role) };
        match self.change(change).await? {
            AuthOutcome::Role(role) => Ok(role),
            _ => Err(StoreError::Internal("a role change answered no role".into())),
        }
    }

    /// Deletes a role (nothing when there is none).
    ///
    /// # Errors
    /// Storage failure.
    pub async fn delete_role(&self, role_id: String) -> Result<(), StoreError> {
        self.change(AuthChange::DeleteRole(role_id)).await.map(drop)
    }

    /// Credentials for one run, valid until `until`: what a claim hands the worker.
    #[must_use]
    pub fn run_credentials(
        &self,
        task_id: TaskId,
        run_id: u32,
        (worker_group, worker_id): (&str, &str),
        task_scopes: &[String],
        until: Timestamp,
    ) -> RunCredentials {
        let client_id =
            shoal_engine::auth::run_client_id(task_id, run_id, worker_group, worker_id, until.millis() / 1000);
        let scopes = shoal_engine::auth::run_scopes(task_id, run_id, task_scopes);
        // A little before now, so that a worker's clock a bit behind still accepts it.
        let start = now().millis() - 15 * 60 * 1000;
        let (cert, access_token) = certificate::issue(
            QUEUE_CLIENT_ID,
            &self.inner.signing_token,
            Some(&client_id),
            scopes,
            (start, until.millis()),
            new_secret(),
        );
        let certificate = serde_json::to_string(&cert).unwrap_or_default();
        RunCredentials { client_id, access_token, certificate }
    }

    /// The server's own key, to sign the URLs it hands out.
    #[must_use]
    pub fn signing_token(&self) -> &str {
        &self.inner.signing_token
    }
}

fn expect_client(outcome: AuthOutcome) -> Result<Client, StoreError> {
    match outcome {
        AuthOutcome::Client(client) => Ok(client),
        _ => Err(StoreError::Internal("a client change answered no client".into())),
    }
}

/// Reloads clients and roles whenever another server changed them, until `shutdown`.
pub async fn run_auth_refresh(authority: Authority, shutdown: impl std::future::Future<Output = ()>) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut tick = tokio::time::interval(REFRESH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = tick.tick() => {
                if let Err(err) = authority.refresh().await {
                    tracing::warn!(error = %err, "reloading clients and roles");
                }
            }
        }
    }
}
