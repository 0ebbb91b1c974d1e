/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { ApiError, ocsUrl, request } from '../../src/api/client.js'
import { freePort, startOcsServer } from './helpers/ocsServer.js'

describe('ocsUrl', () => {
	it('builds the app route below ocs/v2.php on the page origin', () => {
		expect(ocsUrl('me/status')).toBe(`${window.location.origin}/ocs/v2.php/apps/istota/api/v1/me/status`)
	})
})

describe('request', () => {
	let srv
	beforeEach(async () => { srv = await startOcsServer() })
	afterEach(async () => { await srv.close() })

	it('sends the OCS and CSRF headers and unwraps ocs.data', async () => {
		srv.routes['PUT me/settings'] = (req) => [200, { echo: req.body }]
		const data = await request('PUT', 'me/settings', { data: { persona: 'kind' } })
		expect(data).toEqual({ echo: { persona: 'kind' } })
		const req = srv.requests[0]
		expect(req.method).toBe('PUT')
		expect(req.headers['ocs-apirequest']).toBe('true')
		expect(req.headers.requesttoken).toBe('test-request-token')
		expect(req.headers.accept).toContain('application/json')
	})

	const cases = [
		{
			name: 'sidecar down (app answers 503 sidecar_unavailable)',
			answer: [503, { code: 'sidecar_unavailable', message: 'The Istota service is not running.' }],
			want: { status: 503, code: 'sidecar_unavailable', message: 'The Istota service is not running.' },
		},
		{
			name: 'field-level problems',
			answer: [422, { code: 'invalid_settings', message: 'bad values', fields: { 'workers.max': 'must be at least 1' } }],
			want: { status: 422, code: 'invalid_settings', fields: { 'workers.max': 'must be at least 1' } },
		},
		{
			name: 'USER.md conflict carries the current ETag',
			answer: [409, { code: 'conflict', message: 'changed', current_etag: '"abc"' }],
			want: { status: 409, code: 'conflict', currentEtag: '"abc"' },
		},
		{
			name: 'a proxy error page means nobody answered behind Nextcloud',
			answer: [502, '<html>Bad gateway</html>', 'text/html'],
			want: { status: 502, code: 'sidecar_unavailable' },
		},
		{
			name: 'an error without a message gets one for people',
			answer: [404, { code: 'not_found' }],
			want: { status: 404, code: 'not_found', message: 'It no longer exists.' },
		},
		{
			name: 'a 200 that is not OCS JSON (a login page)',
			answer: [200, '<html>login</html>', 'text/html'],
			want: { status: 200, code: 'server_error' },
		},
	]
	for (const c of cases) {
		it(c.name, async () => {
			srv.routes['GET me/status'] = () => c.answer
			const err = await request('GET', 'me/status').catch((e) => e)
			expect(err).toBeInstanceOf(ApiError)
			expect(err).toMatchObject(c.want)
			expect(err.message).not.toBe('')
		})
	}
})

describe('request without a server', () => {
	it('maps a refused connection to code network', async () => {
		const port = await freePort()
		// eslint-disable-next-line no-undef
		jsdom.reconfigure({ url: `http://127.0.0.1:${port}/settings/user/istota` })
		const err = await request('GET', 'me').catch((e) => e)
		expect(err).toBeInstanceOf(ApiError)
		expect(err.code).toBe('network')
		expect(err.status).toBe(0)
	})
})
