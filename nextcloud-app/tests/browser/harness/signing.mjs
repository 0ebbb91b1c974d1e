/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * What the PHP app does to talk to the sidecar, for the browser-test harness: v1 request
 * signing (docs/app-sidecar-protocol.md) and WebSocket tokens (docs/user-api.md).
 * Checked against sidecar/internal/signing/testdata/*.json by tests/js/signing.test.js.
 */
import { createHash, createHmac, randomBytes } from 'node:crypto'

/**
 * canonical is the string the v1 signature covers.
 *
 * @param {string} method HTTP method
 * @param {string} pathWithQuery path with query, exactly as sent
 * @param {string} timestamp Unix seconds, decimal
 * @param {string} nonce hex nonce
 * @param {Buffer|string} body raw body bytes
 * @return {string}
 */
export function canonical(method, pathWithQuery, timestamp, nonce, body) {
	const bodyHash = createHash('sha256').update(body ?? '').digest('hex')
	return ['v1', method.toUpperCase(), pathWithQuery, timestamp, nonce, bodyHash].join('\n')
}

/**
 * sign is the X-Istota-Signature value.
 *
 * @param {string} secret shared secret
 * @param {string} method HTTP method
 * @param {string} pathWithQuery path with query
 * @param {string} timestamp Unix seconds
 * @param {string} nonce hex nonce
 * @param {Buffer|string} body raw body
 * @return {string}
 */
export function sign(secret, method, pathWithQuery, timestamp, nonce, body) {
	return 'v1=' + createHmac('sha256', secret).update(canonical(method, pathWithQuery, timestamp, nonce, body)).digest('hex')
}

/**
 * signedHeaders are the three headers of a signed request made now.
 *
 * @param {string} secret shared secret
 * @param {string} method HTTP method
 * @param {string} pathWithQuery path with query
 * @param {Buffer|string} body raw body
 * @return {Object<string, string>}
 */
export function signedHeaders(secret, method, pathWithQuery, body) {
	const timestamp = String(Math.floor(Date.now() / 1000))
	const nonce = randomBytes(16).toString('hex')
	return {
		'X-Istota-Timestamp': timestamp,
		'X-Istota-Nonce': nonce,
		'X-Istota-Signature': sign(secret, method, pathWithQuery, timestamp, nonce, body),
	}
}

/** Label that separates WebSocket token MACs from request signatures. */
export const WS_TOKEN_LABEL = 'istota-ws-v1'

/**
 * wsTokenFromPayload builds "v1.<payload>.<mac>" from the payload JSON text.
 *
 * @param {string} secret shared secret
 * @param {string} payloadJson the JSON of {uid, exp, nonce}
 * @return {string}
 */
export function wsTokenFromPayload(secret, payloadJson) {
	const payload = Buffer.from(payloadJson, 'utf8').toString('base64url')
	const mac = createHmac('sha256', secret).update(WS_TOKEN_LABEL + '\n' + payload).digest('base64url')
	return `v1.${payload}.${mac}`
}

/**
 * mintWsToken mints a token for uid that expires `ttl` seconds from now (at most 120).
 *
 * @param {string} secret shared secret
 * @param {string} uid the user
 * @param {number} [ttl] seconds
 * @return {{token: string, expires_in: number}}
 */
export function mintWsToken(secret, uid, ttl = 60) {
	const expiresIn = Math.min(ttl, 120)
	const payload = JSON.stringify({ uid, exp: Math.floor(Date.now() / 1000) + expiresIn, nonce: randomBytes(16).toString('hex') })
	return { token: wsTokenFromPayload(secret, payload), expires_in: expiresIn }
}
