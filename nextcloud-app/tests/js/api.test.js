/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Every wrapper calls the route of the contract (docs/user-api.md) with the right method,
 * query and body.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import * as admin from '../../src/api/admin.js'
import * as personal from '../../src/api/personal.js'
import { startOcsServer } from './helpers/ocsServer.js'

let srv
beforeAll(async () => {
	srv = await startOcsServer()
})
afterAll(async () => { await srv.close() })
beforeEach(() => { srv.requests.length = 0 })

const cases = [
	{ name: 'getMe', call: () => personal.getMe(), method: 'GET', route: 'me' },
	{ name: 'getStatus', call: () => personal.getStatus(), method: 'GET', route: 'me/status' },
	{ name: 'getTaskEvents', call: () => personal.getTaskEvents(12, 7), method: 'GET', route: 'me/tasks/12/events', query: { after: '7' } },
	{ name: 'stopTasks', call: () => personal.stopTasks(), method: 'POST', route: 'me/stop' },
	{ name: 'mintWsToken', call: () => personal.mintWsToken(), method: 'POST', route: 'me/ws-token' },
	{ name: 'getUserMemory', call: () => personal.getUserMemory(), method: 'GET', route: 'me/memory/user' },
	{ name: 'putUserMemory', call: () => personal.putUserMemory('# Me\n', '"e1"'), method: 'PUT', route: 'me/memory/user', body: { content: '# Me\n', etag: '"e1"' } },
	{ name: 'getAudit', call: () => personal.getAudit(10), method: 'GET', route: 'me/memory/audit', query: { limit: '10' } },
	{ name: 'getChannels', call: () => personal.getChannels(), method: 'GET', route: 'me/memory/channels' },
	{ name: 'getDated', call: () => personal.getDated(30), method: 'GET', route: 'me/memory/dated', query: { days: '30' } },
	{ name: 'getFacts', call: () => personal.getFacts(), method: 'GET', route: 'me/memory/facts' },
	{ name: 'invalidateFact', call: () => personal.invalidateFact(5), method: 'POST', route: 'me/memory/facts/5/invalidate' },
	{ name: 'deleteFact', call: () => personal.deleteFact(5), method: 'DELETE', route: 'me/memory/facts/5' },
	{ name: 'searchMemory', call: () => personal.searchMemory('dentist appointment', 20), method: 'GET', route: 'me/memory/search', query: { q: 'dentist appointment', limit: '20' } },
	{ name: 'getSchedule', call: () => personal.getSchedule(), method: 'GET', route: 'me/schedule' },
	{ name: 'jobAction enable', call: () => personal.jobAction('morning news', 'enable'), method: 'POST', route: 'me/schedule/jobs/morning%20news/enable' },
	{ name: 'jobAction with a slash in the name', call: () => personal.jobAction('a/b', 'run'), method: 'POST', route: 'me/schedule/jobs/a%2Fb/run' },
	{ name: 'getSettings', call: () => personal.getSettings(), method: 'GET', route: 'me/settings' },
	{ name: 'putSettings', call: () => personal.putSettings({ timezone: 'Europe/Berlin' }), method: 'PUT', route: 'me/settings', body: { timezone: 'Europe/Berlin' } },
	{ name: 'getHealth', call: () => admin.getHealth(), method: 'GET', route: 'admin/health' },
	{ name: 'getAdminSettings', call: () => admin.getAdminSettings(), method: 'GET', route: 'admin/settings' },
	{ name: 'putAdminSettings', call: () => admin.putAdminSettings({ workers: { max: 2 } }), method: 'PUT', route: 'admin/settings', body: { workers: { max: 2 } } },
]

describe('API wrappers', () => {
	for (const c of cases) {
		it(c.name, async () => {
			const key = `${c.method} ${decodeURIComponent(c.route)}`
			srv.routes[`${c.method} ${c.route}`] = () => [200, { route: key }]
			const data = await c.call()
			expect(data).toEqual({ route: key })
			expect(srv.requests).toHaveLength(1)
			const req = srv.requests[0]
			expect(req.method).toBe(c.method)
			expect(req.route).toBe(c.route)
			expect(req.query).toEqual(c.query || {})
			expect(req.body).toEqual(c.body)
		})
	}

	it('refuses an unknown job action without a request', async () => {
		await expect(personal.jobAction('x', 'delete')).rejects.toThrow(TypeError)
		expect(srv.requests).toHaveLength(0)
	})
})
