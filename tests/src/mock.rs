//! A mocked API server for the controllers' unit tests: the test answers each request the code
//! under test makes, and sees what it was asked.

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value as Json, json};

/// One request as the API server received it.
#[derive(Debug)]
pub struct Asked {
    pub method: String,
    /// Path and query.
    pub uri: String,
    pub content_type: String,
    /// The media types it accepts in answer.
    pub accept: String,
    /// The body, `Null` when empty.
    pub body: Json,
}

pub struct ApiServer(tower_test::mock::Handle<Request<Body>, Response<Body>>);

/// A client of a mocked API server. Dropping the server makes every request fail, so a test
/// that expects no request drops it.
pub fn client() -> (Client, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServer(handle))
}

impl ApiServer {
    /// Waits for the next request and answers it with `code` and `body`. A request that never
    /// comes fails the test rather than hanging it.
    pub async fn answer(&mut self, code: u16, body: Json) -> Asked {
        let next = tokio::time::timeout(std::time::Duration::from_secs(10), self.0.next_request());
        let (request, respond) = next.await.expect("no request came").expect("a request");
        let header = |name| {
            request
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap_or_default().to_string())
                .unwrap_or_default()
        };
        let asked = Asked {
            method: request.method().to_string(),
            uri: request.uri().to_string(),
            content_type: header(http::header::CONTENT_TYPE),
            accept: header(http::header::ACCEPT),
            body: {
                let bytes = request.into_body().collect_bytes().await.unwrap_or_default();
                serde_json::from_slice(&bytes).unwrap_or(Json::Null)
            },
        };
        let response = Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&body).unwrap_or_default()))
            .expect("a response");
        respond.send_response(response);
        asked
    }
}

/// The `Status` the API server sends with an error `code`.
pub fn failure(code: u16) -> Json {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("mocked {code}"), "reason": "Mocked", "code": code})
}
