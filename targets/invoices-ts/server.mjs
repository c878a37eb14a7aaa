/**
 * A reference MCP server on the official TypeScript SDK with one side-effecting tool,
 * `create_invoice`, and known idempotency: the invoices target of targets/invoices/, again.
 *
 * It is an ordinary MCP server on `@modelcontextprotocol/sdk` 1.x (`McpServer`,
 * `StreamableHTTPServerTransport`, the SDK's Express app, on 127.0.0.1:$PORT/mcp) with a real
 * PostgreSQL store through the pure-JS `pg` driver, written the way the SDK's own examples
 * write a server; it never imports the harness. Unlike the Python target it speaks the 2025
 * protocol revisions (2025-11-25 and older), WITH SESSIONS: `initialize` (no session header)
 * creates a session whose id comes back in the `Mcp-Session-Id` response header; later requests
 * carry that id and `MCP-Protocol-Version`. Sessions live in this process's memory, as in every
 * SDK example, so after the process is killed and started again an old session id is answered
 * HTTP 404 (JSON-RPC -32001 "Session not found") and the client must initialize again; a
 * request with no session id that is not an `initialize` is answered 400. See README.md.
 *
 * The idempotency design is chosen at start-up, so the harness can be shown to catch the bugs
 * it claims to catch and to pass the design that has none:
 *
 * naive    ignores the key: every call that commits creates an invoice.
 * keyed    read-then-write: look the key up; create the invoice and commit; then store the key
 *          record in a *second* commit. A crash (or a cancellation) between the two commits, or
 *          two concurrent attempts with one key, gives a duplicate.
 * atomic   the invoice and the key record in *one* transaction, with a unique constraint on the
 *          key: a retry replays. An attempt whose key is still in flight in this process gets a
 *          retryable `idempotency_key_in_use` (the IETF draft's 409) with `retry_after_ms`; a
 *          loser that got past that (the key was in flight in a process that died) rolls back
 *          in the transaction and replays the winner.
 *
 * Replays return the stored original result byte for byte. Tool handlers run to completion: a
 * closed response stream or `notifications/cancelled` aborts the SDK's `extra.signal`, which
 * these handlers (like most) do not watch. Configuration is by environment variable (see
 * targets/invoices-ts/README.md); the names and meanings are the Python target's:
 *
 * PORT, HOST                    where to listen (HOST must be a loopback address)
 * INVOICES_DB                   a postgresql:// URL (required; no SQLite here: no native modules)
 * INVOICES_SINK_URL             optional downstream: every invoice created is POSTed there
 *                               ({"marker": memo, ...}), as a payment provider would be called
 * INVOICES_MODE                 naive | keyed | atomic (default atomic)
 * INVOICES_TRANSPORT            json (default) | sse (responses are event streams carrying
 *                               progress notifications when the call asks for progress)
 * INVOICES_SESSIONS             sessions (default) | stateless (the SDK's stateless mode:
 *                               sessionIdGenerator undefined, a new transport per request)
 * INVOICES_PRE_COMMIT_MS        work before the business commit
 * INVOICES_BETWEEN_COMMITS_MS   work between the business commit and the key record
 * INVOICES_POST_COMMIT_MS       work after the commits, before the response
 * INVOICES_LATENCY_JITTER       0..1: each wait is drawn uniformly from base*(1±jitter), so
 *                               concurrent calls drift out of lockstep as real work does
 * INVOICES_FAILPOINT            POINT@N: SIGKILL this process the N-th time (1-based, counted
 *                               per store) a call reaches POINT, one of before_business_commit,
 *                               after_business_commit, after_key_record, before_response
 *
 * Bad configuration prints one line on stderr and exits 2; a store that cannot be opened or a
 * port that cannot be bound, one line and exit 1. SIGTERM/SIGINT stop gracefully.
 */

import { createHash, randomUUID } from 'node:crypto';
import process from 'node:process';

import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import pg from 'pg';
import * as z from 'zod/v4';

const NAME = 'invoices-ts';
const MODES = ['naive', 'keyed', 'atomic'];
const FAILPOINTS = ['before_business_commit', 'after_business_commit', 'after_key_record', 'before_response'];

class ConfigError extends Error {}

/** Python's repr() of a str, for messages worded like the Python target's. */
const repr = (s) => `'${String(s).replaceAll('\\', '\\\\').replaceAll("'", "\\'")}'`;

function configFromEnv(env) {
    const number = (name) => {
        const raw = env[name] ?? '0';
        const value = raw.trim() === '' ? Number.NaN : Number(raw);
        if (!Number.isFinite(value)) throw new ConfigError(`${name}=${repr(raw)} is not a number of milliseconds`);
        if (value < 0) throw new ConfigError(`${name}=${repr(raw)} must be >= 0`);
        return value / 1000; // seconds, computed as the Python target does (retry_after_ms below)
    };
    if (env.PORT === undefined || env.INVOICES_DB === undefined) {
        throw new ConfigError(
            'PORT and INVOICES_DB must be set (e.g. PORT=8123 INVOICES_DB=postgresql://postgres@127.0.0.1:5432/invoices)'
        );
    }
    const port = /^\s*\d+\s*$/.test(env.PORT) ? Number(env.PORT) : Number.NaN;
    if (!(port >= 0 && port <= 65535)) throw new ConfigError(`PORT=${repr(env.PORT)} is not a port number`);
    const db = env.INVOICES_DB;
    if (!/^postgres(ql)?:\/\//.test(db)) {
        throw new ConfigError(
            `INVOICES_DB=${repr(db)}: this target stores in PostgreSQL only; give a postgresql:// URL`
        );
    }
    const mode = env.INVOICES_MODE ?? 'atomic';
    if (!MODES.includes(mode)) throw new ConfigError(`INVOICES_MODE=${repr(mode)}; choose one of ${MODES.join(', ')}`);
    const transport = env.INVOICES_TRANSPORT ?? 'json';
    if (!['json', 'sse'].includes(transport)) {
        throw new ConfigError(`INVOICES_TRANSPORT=${repr(transport)}; choose json or sse`);
    }
    const sessions = env.INVOICES_SESSIONS ?? 'sessions';
    if (!['sessions', 'stateless'].includes(sessions)) {
        throw new ConfigError(`INVOICES_SESSIONS=${repr(sessions)}; choose sessions or stateless`);
    }
    const host = env.HOST ?? '127.0.0.1';
    if (!(host.startsWith('127.') || host === '::1' || host === 'localhost')) {
        throw new ConfigError(`HOST=${repr(host)}: the reference target only listens on loopback`);
    }
    const rawJitter = env.INVOICES_LATENCY_JITTER ?? '0';
    const jitter = rawJitter.trim() === '' ? Number.NaN : Number(rawJitter);
    if (!(jitter >= 0 && jitter <= 1)) {
        throw new ConfigError(`INVOICES_LATENCY_JITTER=${repr(rawJitter)} must be a number from 0 to 1`);
    }
    let failpoint = null;
    const rawFailpoint = env.INVOICES_FAILPOINT ?? '';
    if (rawFailpoint !== '') {
        const at = rawFailpoint.indexOf('@');
        const point = at < 0 ? rawFailpoint : rawFailpoint.slice(0, at);
        const nth = at < 0 ? '' : rawFailpoint.slice(at + 1);
        if (!FAILPOINTS.includes(point) || !/^\d+$/.test(nth) || Number(nth) < 1) {
            throw new ConfigError(
                `INVOICES_FAILPOINT=${repr(rawFailpoint)}; use POINT@N with POINT in ${FAILPOINTS.join(', ')}`
            );
        }
        failpoint = { point, nth: Number(nth) };
    }
    return {
        host,
        port,
        db,
        sinkUrl: env.INVOICES_SINK_URL || null,
        mode,
        transport,
        sessions,
        preCommitS: number('INVOICES_PRE_COMMIT_MS'),
        betweenCommitsS: number('INVOICES_BETWEEN_COMMITS_MS'),
        postCommitS: number('INVOICES_POST_COMMIT_MS'),
        jitter,
        failpoint
    };
}

// ---------------------------------------------------------------------------------------------
// JSON exactly as the Python target writes it (json.dumps: ensure_ascii, its separators), so the
// stored responses, request hashes and error texts of the two targets are the same bytes.

const asciiOnly = (json) =>
    json.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

/** json.dumps(value, separators=(",", ":")) for strings, numbers, arrays and flat objects. */
const compactJson = (value) => asciiOnly(JSON.stringify(value));

/** json.dumps(obj) of a flat object: ", " and ": " separators. */
const pythonJson = (obj) =>
    `{${Object.entries(obj)
        .map(([k, v]) => `${compactJson(k)}: ${compactJson(v)}`)
        .join(', ')}}`;

/** Python's round(): half to even. */
const roundHalfEven = (x) => {
    const r = Math.round(x);
    return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
};

/** datetime.now(UTC).isoformat(timespec="microseconds"), e.g. 2026-11-30T09:26:53.123456+00:00 */
function nowIso() {
    const us = Math.round((performance.timeOrigin + performance.now()) * 1000);
    const ms = Math.floor(us / 1000);
    const seconds = new Date(ms).toISOString().slice(0, 19);
    return `${seconds}.${String(us % 1_000_000).padStart(6, '0')}+00:00`;
}

function invoiceJson(invoiceId, customerId, amountCents, memo, createdAt) {
    const invoice = {
        invoice_id: `inv_${String(invoiceId).padStart(8, '0')}`,
        customer_id: customerId,
        amount_cents: amountCents,
        memo,
        created_at: createdAt
    };
    return compactJson(invoice);
}

// ---------------------------------------------------------------------------------------------
// The store: the Python target's PostgreSQL schema and statements, on a pg.Pool. Every
// transaction has a connection of its own; what interleaves between them is exactly what the
// idempotency designs have to get right.

const SCHEMA = [
    `CREATE TABLE IF NOT EXISTS invoices (
        id BIGSERIAL PRIMARY KEY,
        customer_id TEXT NOT NULL,
        amount_cents BIGINT NOT NULL,
        memo TEXT NOT NULL,
        created_at TEXT NOT NULL
    )`,
    `CREATE TABLE IF NOT EXISTS idempotency_keys (
        key TEXT PRIMARY KEY,
        request_hash TEXT NOT NULL,
        response TEXT NOT NULL,
        created_at TEXT NOT NULL
    )`,
    'CREATE TABLE IF NOT EXISTS failpoint_hits (point TEXT PRIMARY KEY, hits INTEGER NOT NULL)'
];

const UNIQUE_VIOLATION = '23505';

class Conflict extends Error {}

class PostgresStore {
    constructor(url) {
        this.pool = new pg.Pool({ connectionString: url, max: 16 });
        // An idle connection the server dropped must not crash the process; the next query reconnects.
        this.pool.on('error', (err) => console.error(`${NAME}: idle PostgreSQL connection lost: ${err.message}`));
    }

    async open() {
        for (const statement of SCHEMA) await this.pool.query(statement);
    }

    async close() {
        await this.pool.end();
    }

    async transaction(work) {
        const client = await this.pool.connect();
        let broken;
        try {
            await client.query('BEGIN');
            const result = await work(client);
            await client.query('COMMIT');
            return result;
        } catch (err) {
            try {
                await client.query('ROLLBACK');
            } catch (rollbackErr) {
                broken = rollbackErr;
            }
            throw err;
        } finally {
            client.release(broken);
        }
    }

    /** Count a pass through `point`; persisted so a restarted process keeps counting. */
    async failpointHit(point) {
        const { rows } = await this.pool.query(
            'INSERT INTO failpoint_hits (point, hits) VALUES ($1, 1) ' +
                'ON CONFLICT (point) DO UPDATE SET hits = failpoint_hits.hits + 1 RETURNING hits',
            [point]
        );
        return Number(rows[0].hits);
    }

    async findKey(key, db = this.pool) {
        const { rows } = await db.query('SELECT request_hash, response FROM idempotency_keys WHERE key = $1', [key]);
        return rows.length === 0 ? null : { requestHash: rows[0].request_hash, response: rows[0].response };
    }

    async #insertInvoice(db, customerId, amountCents, memo, createdAt) {
        const { rows } = await db.query(
            'INSERT INTO invoices (customer_id, amount_cents, memo, created_at) VALUES ($1, $2, $3, $4) RETURNING id',
            [customerId, amountCents, memo, createdAt]
        );
        return invoiceJson(rows[0].id, customerId, amountCents, memo, createdAt);
    }

    /** One commit: the business write alone (naive, and keyed's first commit). */
    createInvoice(customerId, amountCents, memo, createdAt) {
        return this.transaction((db) => this.#insertInvoice(db, customerId, amountCents, memo, createdAt));
    }

    /** Keyed's second commit. The first record for a key wins; a racing attempt's is dropped. */
    async recordKey(key, requestHash, response, createdAt) {
        await this.transaction((db) =>
            db.query(
                'INSERT INTO idempotency_keys (key, request_hash, response, created_at) ' +
                    'VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO NOTHING',
                [key, requestHash, response, createdAt]
            )
        );
    }

    /** Atomic: invoice and key record in one transaction. Returns {response, created}. */
    async createInvoiceWithKey(key, requestHash, customerId, amountCents, memo, createdAt) {
        try {
            const response = await this.transaction(async (db) => {
                if ((await this.findKey(key, db)) !== null) throw new Conflict();
                const created = await this.#insertInvoice(db, customerId, amountCents, memo, createdAt);
                await db.query(
                    'INSERT INTO idempotency_keys (key, request_hash, response, created_at) VALUES ($1, $2, $3, $4)',
                    [key, requestHash, created, createdAt]
                );
                return created;
            });
            return { response, created: true };
        } catch (err) {
            // Another attempt with this key committed first: ours rolled back, nothing of it exists.
            if (!(err instanceof Conflict) && err?.code !== UNIQUE_VIOLATION) throw err;
        }
        const winner = await this.findKey(key);
        if (winner === null) throw new Error(`idempotency key ${key} lost its record`);
        return { response: winner.response, created: false };
    }

    /** Invoices per memo, for memos starting with the prefix: the read-only view the harness audits. */
    async effects(memoPrefix) {
        const pattern = memoPrefix.replace(/[\\%_]/g, (c) => `\\${c}`) + '%';
        const { rows } = await this.pool.query(
            "SELECT memo, COUNT(*) AS n FROM invoices WHERE memo LIKE $1 ESCAPE '\\' GROUP BY memo",
            [pattern]
        );
        return Object.fromEntries(rows.map((r) => [r.memo, Number(r.n)]));
    }
}

// ---------------------------------------------------------------------------------------------
// The tools.

function errorResult(code, message, { retryable, recovery, retryAfterMs = null }) {
    const body = { code, message, retryable, retry_after_ms: retryAfterMs, recovery };
    return { content: [{ type: 'text', text: pythonJson(body) }], isError: true };
}

/** The result for a stored response text: the same bytes on every replay. */
const storedResult = (response) => ({
    content: [{ type: 'text', text: response }],
    structuredContent: JSON.parse(response)
});

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** What every session's McpServer shares: the store, the keys in flight, the failpoint. */
function buildTarget(config, store) {
    const inFlight = new Set(); // atomic: keys of the calls this process is working on right now
    const callMs = (config.preCommitS + config.betweenCommitsS + config.postCommitS) * 1000;
    const retryAfterMs = Math.max(10, roundHalfEven(callMs));

    async function failpoint(point) {
        if (config.failpoint === null || config.failpoint.point !== point) return;
        if ((await store.failpointHit(point)) === config.failpoint.nth) {
            // The real thing, not an exception: the process dies as if the pod were killed. As PID 1
            // of a container it cannot SIGKILL itself (the kernel shields a namespace's init), so it
            // exits at once instead: no cleanup either way, and 137 is what `docker kill` leaves.
            if (process.pid === 1) process.exit(137);
            process.kill(process.pid, 'SIGKILL');
        }
    }

    async function work(seconds, extra, step) {
        const progressToken = extra._meta?.progressToken;
        if (config.transport === 'sse' && progressToken !== undefined) {
            await extra.sendNotification({
                method: 'notifications/progress',
                params: { progressToken, progress: step, total: 3 }
            });
        }
        if (seconds > 0) {
            await sleep(seconds * (1 - config.jitter + 2 * config.jitter * Math.random()) * 1000);
        }
    }

    /** Tell the downstream (the effect sink) about a new invoice: an effect outside our store. */
    async function notifyDownstream(response) {
        if (config.sinkUrl === null) return;
        const invoice = JSON.parse(response);
        const res = await fetch(config.sinkUrl, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json' },
            body: JSON.stringify({ marker: invoice.memo, ...invoice }),
            signal: AbortSignal.timeout(10_000)
        });
        await res.arrayBuffer();
        if (!res.ok) throw new Error(`effect sink answered HTTP ${res.status}`);
    }

    /** The work and the commit(s), after the key checks. */
    async function create(customerId, amountCents, memo, key, requestHash, now, extra) {
        let response;
        await work(config.preCommitS, extra, 1);
        await failpoint('before_business_commit');
        if (config.mode === 'atomic') {
            const outcome = await store.createInvoiceWithKey(key, requestHash, customerId, amountCents, memo, now);
            response = outcome.response;
            await failpoint('after_business_commit');
            await failpoint('after_key_record');
            if (outcome.created) await notifyDownstream(response);
            await work(config.betweenCommitsS, extra, 2);
        } else {
            response = await store.createInvoice(customerId, amountCents, memo, now);
            await failpoint('after_business_commit');
            await notifyDownstream(response);
            await work(config.betweenCommitsS, extra, 2);
            if (config.mode === 'keyed') await store.recordKey(key, requestHash, response, now);
            await failpoint('after_key_record');
        }
        await work(config.postCommitS, extra, 3);
        await failpoint('before_response');
        return storedResult(response);
    }

    /** One stderr line per call that carries a W3C traceparent (the HTTP header, else
     * _meta.traceparent), before any work: the server's own record of which attempt it served,
     * written even if it dies next. */
    function logTrace(extra, memo) {
        const header = extra.requestInfo?.headers?.traceparent;
        const traceparent = (Array.isArray(header) ? header[0] : header) ?? extra._meta?.traceparent;
        if (typeof traceparent === 'string') {
            console.error(`${NAME}: tools/call create_invoice memo=${memo} traceparent=${traceparent}`);
        }
    }

    async function createInvoice({ customer_id, amount_cents, memo, idempotency_key }, extra) {
        logTrace(extra, memo);
        if (amount_cents <= 0) {
            return errorResult('invalid_amount', 'amount_cents must be positive', {
                retryable: false,
                recovery: 'Send a positive amount.'
            });
        }
        const requestHash = createHash('sha256')
            .update(compactJson([customer_id, amount_cents, memo]))
            .digest('hex');
        const now = nowIso();
        const key = idempotency_key ?? null;
        if (config.mode !== 'naive') {
            if (!key) {
                return errorResult('idempotency_key_required', 'create_invoice needs an idempotency_key', {
                    retryable: false,
                    recovery: 'Generate a unique key for this invoice and call again with it.'
                });
            }
            const found = await store.findKey(key);
            if (found !== null) {
                if (found.requestHash !== requestHash) {
                    return errorResult(
                        'idempotency_key_reused',
                        'this idempotency_key was used for a different invoice',
                        {
                            retryable: false,
                            recovery: 'Use a new key for a new invoice; reuse a key only to retry the same one.'
                        }
                    );
                }
                return storedResult(found.response);
            }
            if (config.mode === 'atomic') {
                if (inFlight.has(key)) {
                    return errorResult(
                        'idempotency_key_in_use',
                        'another call with this idempotency_key is still in progress',
                        {
                            retryable: true,
                            retryAfterMs,
                            recovery: 'Wait retry_after_ms, then retry with the same key to get its result.'
                        }
                    );
                }
                inFlight.add(key);
                try {
                    return await create(customer_id, amount_cents, memo, key, requestHash, now, extra);
                } finally {
                    inFlight.delete(key);
                }
            }
        }
        return create(customer_id, amount_cents, memo, key, requestHash, now, extra);
    }

    async function countInvoices({ memo_prefix }) {
        const effects = await store.effects(memo_prefix);
        return {
            content: [{ type: 'text', text: `${Object.keys(effects).length} memos` }],
            structuredContent: { effects }
        };
    }

    /** A new McpServer (one per session, or per request when stateless) on the shared state. */
    return function mcpServer() {
        const server = new McpServer({ name: 'reference-invoices-ts', version: '1.0.0' });
        server.registerTool(
            'count_invoices',
            {
                description: 'Counts invoices per memo for memos starting with memo_prefix. Read-only; for audits.',
                inputSchema: { memo_prefix: z.string() },
                annotations: { readOnlyHint: true }
            },
            countInvoices
        );
        server.registerTool(
            'create_invoice',
            {
                description:
                    'Creates an invoice. Pass an idempotency_key that is unique per business intent; ' +
                    'a retry with the same key returns the first invoice instead of creating a new one.',
                inputSchema: {
                    customer_id: z.string(),
                    amount_cents: z.number().int(),
                    memo: z.string(),
                    idempotency_key: z.string().nullable().optional()
                }
            },
            createInvoice
        );
        return server;
    };
}

// ---------------------------------------------------------------------------------------------
// HTTP: the SDK's Express app and its transport, routed by session id as the SDK's examples do.

const jsonRpcError = (res, status, code, message) =>
    res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });

function buildApp(config, mcpServer) {
    const sessions = new Map(); // Mcp-Session-Id -> transport; in memory: gone with the process
    const enableJsonResponse = config.transport === 'json';
    const hostname = config.host.includes(':') ? `[${config.host}]` : config.host;
    // The SDK's app: JSON body parser and a Host header check (DNS-rebinding protection).
    const app = createMcpExpressApp({ host: config.host, allowedHosts: ['localhost', '127.0.0.1', '[::1]', hostname] });

    async function sessionful(req, res) {
        const sessionId = req.get('mcp-session-id');
        const transport = sessionId === undefined ? undefined : sessions.get(sessionId);
        if (transport !== undefined) {
            await transport.handleRequest(req, res, req.body);
        } else if (sessionId === undefined && req.method === 'POST' && isInitializeRequest(req.body)) {
            const created = new StreamableHTTPServerTransport({
                sessionIdGenerator: () => randomUUID(),
                enableJsonResponse,
                onsessioninitialized: (id) => {
                    sessions.set(id, created);
                }
            });
            created.onclose = () => {
                if (created.sessionId !== undefined) sessions.delete(created.sessionId);
            };
            await mcpServer().connect(created);
            await created.handleRequest(req, res, req.body);
        } else if (sessionId !== undefined) {
            // Unknown, ended, or from before a restart: the client must initialize a new session.
            jsonRpcError(res, 404, -32001, 'Session not found');
        } else {
            jsonRpcError(res, 400, -32000, 'Bad Request: No valid session ID provided');
        }
    }

    async function stateless(req, res) {
        if (req.method !== 'POST') {
            res.set('Allow', 'POST');
            jsonRpcError(res, 405, -32000, 'Method not allowed.');
            return;
        }
        const server = mcpServer();
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse });
        res.on('close', () => {
            transport.close();
            server.close();
        });
        await server.connect(transport);
        await transport.handleRequest(req, res, req.body);
    }

    const handle = config.sessions === 'stateless' ? stateless : sessionful;
    let active = 0; // POSTs being answered, for a graceful stop
    app.all('/mcp', async (req, res) => {
        const counted = req.method === 'POST';
        if (counted) {
            active += 1;
            res.on('close', () => {
                active -= 1;
            });
        }
        try {
            await handle(req, res);
        } catch (err) {
            console.error(`${NAME}: error handling an MCP request: ${err?.stack ?? err}`);
            if (!res.headersSent) jsonRpcError(res, 500, -32603, 'Internal server error');
        }
    });
    // The body parser's errors (not JSON, too large) as JSON-RPC errors rather than an HTML page.
    app.use((err, req, res, next) => {
        if (res.headersSent) return next(err);
        if (err?.type === 'entity.parse.failed') return jsonRpcError(res, 400, -32700, 'Parse error: Invalid JSON');
        return jsonRpcError(res, err?.status ?? 500, -32603, String(err?.message ?? err));
    });
    return {
        app,
        active: () => active,
        closeSessions: () => Promise.allSettled([...sessions.values()].map((t) => t.close()))
    };
}

function redacted(url) {
    try {
        const parsed = new URL(url);
        if (parsed.password) parsed.password = '***';
        return parsed.toString();
    } catch {
        return url;
    }
}

async function main() {
    let config;
    try {
        config = configFromEnv(process.env);
    } catch (err) {
        if (!(err instanceof ConfigError)) throw err;
        console.error(`${NAME}: ${err.message}`);
        return 2;
    }
    const store = new PostgresStore(config.db);
    try {
        await store.open();
    } catch (err) {
        console.error(`${NAME}: cannot open INVOICES_DB=${redacted(config.db)}: ${err.message}`);
        await store.close().catch(() => {});
        return 1;
    }
    const { app, active, closeSessions } = buildApp(config, buildTarget(config, store));
    const httpServer = app.listen(config.port, config.host);
    httpServer.on('error', async (err) => {
        console.error(`${NAME}: cannot listen on ${config.host}:${config.port}: ${err.message}`);
        await store.close().catch(() => {});
        process.exit(1);
    });
    httpServer.on('listening', () => {
        const host = config.host.includes(':') ? `[${config.host}]` : config.host;
        console.error(
            `${NAME}: mode=${config.mode} transport=${config.transport} sessions=${config.sessions} ` +
                `db=${redacted(config.db)} listening on http://${host}:${config.port}/mcp`
        );
    });

    let stopping = false;
    const stop = async () => {
        if (stopping) return;
        stopping = true;
        // Stop accepting; let the calls being answered finish (bounded), then end sessions and the pool.
        httpServer.close();
        httpServer.closeIdleConnections();
        const deadline = Date.now() + 5000;
        while (active() > 0 && Date.now() < deadline) await sleep(20);
        await closeSessions();
        httpServer.closeAllConnections();
        await store.close().catch(() => {});
        process.exit(0);
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    return undefined;
}

const code = await main();
if (code !== undefined) process.exit(code);
