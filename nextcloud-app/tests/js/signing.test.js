/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The harness signs and mints exactly as the protocol says: same vectors as the Go and
 * PHP tests.
 */
import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { canonical, mintWsToken, sign, wsTokenFromPayload } from '../browser/harness/signing.mjs'

const testdata = join(dirname(fileURLToPath(import.meta.url)), '../../../sidecar/internal/signing/testdata')
const vectors = JSON.parse(readFileSync(join(testdata, 'vectors.json'), 'utf8'))
const wsVectors = JSON.parse(readFileSync(join(testdata, 'ws_vectors.json'), 'utf8'))

describe('request signing vectors', () => {
	it('has vectors', () => {
		expect(vectors.length).toBeGreaterThan(0)
	})
	for (const v of vectors) {
		it(v.name, () => {
			expect(canonical(v.method, v.path, v.timestamp, v.nonce, Buffer.from(v.body, 'utf8'))).toBe(v.canonical)
			expect(sign(v.secret, v.method, v.path, v.timestamp, v.nonce, Buffer.from(v.body, 'utf8'))).toBe(v.signature)
		})
	}
	it('a changed body changes the signature', () => {
		const v = vectors[0]
		expect(sign(v.secret, v.method, v.path, v.timestamp, v.nonce, v.body + ' ')).not.toBe(v.signature)
	})
})

describe('WebSocket token vectors', () => {
	const valid = wsVectors.cases.filter((c) => c.valid)
	it('has valid cases', () => {
		expect(valid.length).toBeGreaterThan(0)
	})
	for (const c of valid) {
		it(c.name, () => {
			expect(wsTokenFromPayload(wsVectors.secret, c.payload_json)).toBe(c.token)
		})
	}
	it('mints tokens that expire within 120 s and carry a 32-hex nonce', () => {
		const { token, expires_in: ttl } = mintWsToken(wsVectors.secret, 'alice', 600)
		expect(ttl).toBe(120)
		const [version, payload, mac] = token.split('.')
		expect(version).toBe('v1')
		const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'))
		expect(claims.uid).toBe('alice')
		expect(claims.nonce).toMatch(/^[0-9a-f]{32}$/)
		expect(claims.exp - Date.now() / 1000).toBeLessThanOrEqual(120)
		expect(wsTokenFromPayload(wsVectors.secret, JSON.stringify(claims))).toBe(`v1.${payload}.${mac}`)
	})
})
