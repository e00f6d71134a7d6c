//! The one error type of the HTTP face, rendered as Taskcluster's `{code, message, requestInfo}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use shoal_engine::Rejection;
use shoal_store::StoreError;

/// An error answer: status, Taskcluster code, message.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Taskcluster's error code, e.g. `ResourceNotFound`.
    pub code: &'static str,
    /// What went wrong, naming the field or entity.
    pub message: String,
}

impl ApiError {
    /// 400 InvalidRequestArguments: a URL or query parameter breaks its rule.
    pub fn bad_argument(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, code: "InvalidRequestArguments", message: message.into() }
    }

    /// 400 InputValidationError: the body breaks its schema.
    pub fn invalid_input(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, code: "InputValidationError", message: message.into() }
    }

    /// 404 ResourceNotFound.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::NOT_FOUND, code: "ResourceNotFound", message: message.into() }
    }

    /// 401 AuthenticationFailed: the credentials are refused.
    pub fn unauthorized(failure: &shoal_engine::auth::AuthFailure) -> ApiError {
        ApiError { status: StatusCode::UNAUTHORIZED, code: "AuthenticationFailed", message: failure.to_string() }
    }

    /// 401 AuthenticationFailed, saying why.
    pub fn authentication_failed(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::UNAUTHORIZED, code: "AuthenticationFailed", message: message.into() }
    }

    /// 403 InsufficientScopes for scopes other than the caller's (a hook's role's).
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::FORBIDDEN, code: "InsufficientScopes", message: message.into() }
    }

    /// 403 InsufficientScopes: the caller lacks `missing` of `required`.
    pub fn insufficient_scopes(
        client_id: Option<&str>,
        required: &shoal_engine::auth::ScopeExpr,
        missing: &shoal_engine::auth::ScopeExpr,
    ) -> ApiError {
        let who = match client_id {
            Some(client_id) => format!("Client ID {client_id}"),
            None => "An anonymous caller (no credentials given)".to_owned(),
        };
        let message = format!(
            "{who} does not have sufficient scopes and is missing the following scopes:\n\n```\n{missing}\n```\n\n\
             This request requires the client to satisfy the following scope expression:\n\n```\n{required}\n```"
        );
        ApiError { status: StatusCode::FORBIDDEN, code: "InsufficientScopes", message }
    }

    /// 500 InternalServerError, the details in the server's log.
    pub fn internal() -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "InternalServerError",
            message: "internal error; see the server log".into(),
        }
    }

    /// 429 TooManyRequests: the caller's address holds its share of something.
    pub fn too_many(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::TOO_MANY_REQUESTS, code: "TooManyRequests", message: message.into() }
    }

    /// 413 InputTooLarge.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::PAYLOAD_TOO_LARGE, code: "InputTooLarge", message: message.into() }
    }
}

impl From<Rejection> for ApiError {
    fn from(rejection: Rejection) -> ApiError {
        let (status, code) = match &rejection {
            Rejection::Invalid { .. } => (StatusCode::BAD_REQUEST, "InputValidationError"),
            Rejection::Input(_) => (StatusCode::BAD_REQUEST, "InputError"),
            Rejection::Conflict(_) => (StatusCode::CONFLICT, "RequestConflict"),
            Rejection::NotFound(_) => (StatusCode::NOT_FOUND, "ResourceNotFound"),
            Rejection::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "InputTooLarge"),
        };
        ApiError { status, code, message: rejection.to_string() }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> ApiError {
        match err {
            StoreError::Rejected(rejection) => rejection.into(),
            StoreError::Unavailable(reason) | StoreError::Conflict(reason) => {
                metrics::counter!("shoal_store_errors_total", "kind" => "unavailable").increment(1);
                tracing::warn!(error = %reason, "storage unavailable");
                ApiError {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    code: "ServiceUnavailable",
                    message: "storage is unavailable; retry later".into(),
                }
            }
            StoreError::Corrupt(_) | StoreError::Database(_) | StoreError::Settings(_) | StoreError::Internal(_) => {
                let kind = match &err {
                    StoreError::Corrupt(_) => "corrupt",
                    StoreError::Database(_) => "database",
                    StoreError::Settings(_) => "settings",
                    _ => "internal",
                };
                metrics::counter!("shoal_store_errors_total", "kind" => kind).increment(1);
                tracing::error!(error = %err, "internal error");
                ApiError {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    code: "InternalServerError",
                    message: "internal error; see the server log".into(),
                }
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // The endpoint layer replaces this body with one whose requestInfo names the
        // endpoint; errors outside any endpoint (no route) keep this one.
        let body = serde_json::json!({"code": self.code, "message": self.message, "requestInfo": {}});
        let mut res = (self.status, axum::Json(body)).into_response();
        res.extensions_mut().insert(self);
        res
    }
}
