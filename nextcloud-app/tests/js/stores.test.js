/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The small stores against a real HTTP server on loopback.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { createAdminStore, parseList, toForm, toPatch } from '../../src/stores/admin.js'
import { createMemoryStore } from '../../src/stores/memory.js'
import { createScheduleStore } from '../../src/stores/schedule.js'
import { createApprovalsStore, stricterChoices } from '../../src/stores/approvals.js'
import { createSettingsStore } from '../../src/stores/settings.js'
import { createStatusStore } from '../../src/stores/status.js'
import { startOcsServer } from './helpers/ocsServer.js'

let srv
beforeEach(async () => { srv = await startOcsServer() })
afterEach(async () => { await srv.close() })

describe('memory store: USER.md', () => {
	it('saves with the ETag it read and keeps the new one', async () => {
		srv.routes['GET me/memory/user'] = () => [200, { content: '# Alice\n', etag: '"e1"' }]
		srv.routes['PUT me/memory/user'] = (req) => [200, { etag: req.body.etag === '"e1"' ? '"e2"' : 'wrong' }]
		const m = createMemoryStore()
		await m.loadUser()
		expect(m.state.user.draft).toBe('# Alice\n')
		expect(m.dirty()).toBe(false)
		m.state.user.draft = '# Alice\n- likes tea\n'
		expect(m.dirty()).toBe(true)
		await m.saveUser()
		expect(m.state.user.etag).toBe('"e2"')
		expect(m.state.user.saved).toBe(true)
		expect(m.dirty()).toBe(false)
		expect(srv.requests.at(-1).body).toEqual({ content: '# Alice\n- likes tea\n', etag: '"e1"' })
	})

	it('a conflict keeps the draft and offers to overwrite with the current ETag', async () => {
		srv.routes['GET me/memory/user'] = () => [200, { content: 'old', etag: '"e1"' }]
		srv.routes['PUT me/memory/user'] = (req) => (req.body.etag === '"e9"'
			? [200, { etag: '"e10"' }]
			: [409, { code: 'conflict', message: 'USER.md changed', current_etag: '"e9"' }])
		const m = createMemoryStore()
		await m.loadUser()
		m.state.user.draft = 'mine'
		await m.saveUser()
		expect(m.state.user.conflict).toEqual({ currentEtag: '"e9"', message: 'USER.md changed' })
		expect(m.state.user.draft).toBe('mine')
		expect(m.state.user.saved).toBe(false)
		await m.saveUser({ overwrite: true })
		expect(m.state.user.conflict).toBeNull()
		expect(m.state.user.etag).toBe('"e10"')
		expect(srv.requests.at(-1).body.etag).toBe('"e9"')
	})

	it('reload after a conflict discards the draft', async () => {
		let content = 'old'
		srv.routes['GET me/memory/user'] = () => [200, { content, etag: `"${content}"` }]
		srv.routes['PUT me/memory/user'] = () => [409, { code: 'conflict', message: 'changed', current_etag: '"new"' }]
		const m = createMemoryStore()
		await m.loadUser()
		m.state.user.draft = 'mine'
		await m.saveUser()
		content = 'new'
		await m.loadUser()
		expect(m.state.user.conflict).toBeNull()
		expect(m.state.user.draft).toBe('new')
	})

	it('refuses more than 64 KiB without a request', async () => {
		srv.routes['GET me/memory/user'] = () => [200, { content: '', etag: '"e"' }]
		const m = createMemoryStore()
		await m.loadUser()
		m.state.user.draft = 'ä'.repeat(33 * 1024) // 66 KiB in UTF-8
		const before = srv.requests.length
		await m.saveUser()
		expect(m.state.user.error.code).toBe('too_large')
		expect(srv.requests.length).toBe(before)
	})

	it('facts: invalidate and delete reload the list', async () => {
		let facts = [{ id: 1, subject: 'user:alice', predicate: 'likes', object: 'tea' }, { id: 2, subject: 'user:alice', predicate: 'lives_in', object: 'Berlin' }]
		srv.routes['GET me/memory/facts'] = () => [200, { facts }]
		srv.routes['POST me/memory/facts/1/invalidate'] = () => { facts = facts.filter((f) => f.id !== 1); return [200, { ok: true }] }
		srv.routes['DELETE me/memory/facts/2'] = () => { facts = facts.filter((f) => f.id !== 2); return [200, { ok: true }] }
		const m = createMemoryStore()
		await m.loadFacts()
		expect(m.state.facts.list).toHaveLength(2)
		await m.invalidateFact(1)
		expect(m.state.facts.list.map((f) => f.id)).toEqual([2])
		await m.deleteFact(2)
		expect(m.state.facts.list).toEqual([])
		expect(m.state.facts.busy).toEqual({})
	})

	it('search sends the trimmed words and skips empty ones', async () => {
		srv.routes['GET me/memory/search'] = (req) => [200, { results: [{ namespace: 'user:alice', text: `found ${req.query.q}`, at: '', score: 1 }] }]
		const m = createMemoryStore()
		m.state.search.query = '   '
		await m.search()
		expect(srv.requests).toHaveLength(0)
		m.state.search.query = '  tea  '
		await m.search()
		expect(m.state.search.results[0].text).toBe('found tea')
	})

	it('each part keeps its own error', async () => {
		srv.routes['GET me/memory/user'] = () => [200, { content: 'x', etag: '"x"' }]
		srv.routes['GET me/memory/audit'] = () => [503, { code: 'sidecar_unavailable', message: 'down' }]
		srv.routes['GET me/memory/channels'] = () => [200, { channels: [{ token: 'abc', name: 'Team', content: '# Team' }] }]
		srv.routes['GET me/memory/dated'] = () => [200, { days: [{ date: '2026-11-21', content: 'met Bob' }] }]
		srv.routes['GET me/memory/facts'] = () => [200, { facts: [] }]
		const m = createMemoryStore()
		await m.loadAll()
		expect(m.state.audit.error.code).toBe('sidecar_unavailable')
		expect(m.state.channels.list[0].name).toBe('Team')
		expect(m.state.dated.days[0].date).toBe('2026-11-21')
		expect(m.state.user.error).toBeNull()
	})
})

describe('schedule store', () => {
	const job = (over) => ({ name: 'news', schedule: '0 8 * * *', enabled: true, consecutive_failures: 0, ...over })

	it('loads jobs and file problems, and puts an action\'s answer in place', async () => {
		srv.routes['GET me/schedule'] = () => [200, {
			jobs: [job(), job({ name: 'backup' })],
			cron_file: { problems: [{ line: 7, field: 'cron', message: 'bad expression' }], kept_last_good: true },
			checks: [], briefings: [],
		}]
		srv.routes['POST me/schedule/jobs/news/disable'] = () => [200, job({ enabled: false, disabled_by: 'user' })]
		const s = createScheduleStore()
		await s.load()
		expect(s.state.cronFile.problems[0].line).toBe(7)
		expect(s.state.cronFile.kept_last_good).toBe(true)
		expect(s.state.heartbeatFile.problems).toEqual([])
		await s.act('news', 'disable')
		expect(s.state.jobs[0].enabled).toBe(false)
		expect(s.state.jobs[1].enabled).toBe(true)
		expect(s.state.busy).toEqual({})
	})

	it('a refused action is shown and the list stays', async () => {
		srv.routes['GET me/schedule'] = () => [200, { jobs: [job({ enabled: false })] }]
		srv.routes['POST me/schedule/jobs/news/enable'] = () => [409, { code: 'conflict', message: 'CRON.md disables this job' }]
		const s = createScheduleStore()
		await s.load()
		await s.act('news', 'enable')
		expect(s.state.actionError.error.message).toBe('CRON.md disables this job')
		expect(s.state.jobs[0].enabled).toBe(false)
	})
})

describe('settings store', () => {
	const stored = { persona: 'Be brief.', timezone: 'UTC', emails: ['a@example.org'], calendars: { available: [{ href: '/cal/1', name: 'Work' }, { href: '/cal/2', name: 'Home' }], enabled: ['/cal/1'] }, files_path: '/istota' }

	it('sends only what changed, trimmed', async () => {
		srv.routes['GET me/settings'] = () => [200, stored]
		srv.routes['PUT me/settings'] = (req) => [200, { ...stored, ...req.body, calendars: { ...stored.calendars, enabled: req.body.calendars || stored.calendars.enabled } }]
		const s = createSettingsStore()
		await s.load()
		expect(s.patch()).toEqual({})
		s.state.form.emails.push('  b@example.org ', '')
		s.state.form.calendars.push('/cal/2')
		await s.save()
		expect(srv.requests.at(-1).body).toEqual({ emails: ['a@example.org', 'b@example.org'], calendars: ['/cal/1', '/cal/2'] })
		expect(s.state.savedOk).toBe(true)
		expect(s.state.form.emails).toEqual(['a@example.org', 'b@example.org'])
	})

	it('422 puts the messages on the fields', async () => {
		srv.routes['GET me/settings'] = () => [200, stored]
		srv.routes['PUT me/settings'] = () => [422, { code: 'invalid_settings', message: 'invalid', fields: { timezone: 'unknown time zone', 'emails.0': 'claimed by another user' } }]
		const s = createSettingsStore()
		await s.load()
		s.state.form.timezone = 'Mars/Olympus'
		await s.save()
		expect(s.state.fieldErrors).toEqual({ timezone: 'unknown time zone', 'emails.0': 'claimed by another user' })
		expect(s.state.form.timezone).toBe('Mars/Olympus')
	})
})

describe('admin store', () => {
	const settings = {
		access: { users: ['alice'], groups: [], admin_users: [], admin_groups: ['ops'] },
		sandbox: { enabled: true, admin_db_write: false, memory_mb: 4096, max_processes: 512, max_open_files: 4096, cpu_seconds: 1800 },
		network: { allowed_hosts: ['api.example.org:443'] },
		brain: { kind: 'claude', model: '', api_base_url: 'https://api.example.org', api_key_set: true, daily_token_budget: 0 },
		workers: { max: 4, reserved_interactive: 1 },
		limits: { task_timeout_seconds: 900, retention_days: 180 },
	}

	it('never prefills the API key and sends it only when typed', () => {
		const form = toForm(settings)
		expect(form['brain.api_key']).toBe('')
		expect(form['access.users']).toBe('alice')
		expect(toPatch(form, { ...form })).toEqual({})
		expect(toPatch({ ...form, 'brain.api_key': 'sk-new' }, form)).toEqual({ brain: { api_key: 'sk-new' } })
		expect(toPatch(form, form, { clearApiKey: true })).toEqual({ brain: { api_key: '' } })
	})

	it('treats the subscription token like the API key: write-only, sent when typed or cleared', () => {
		const form = toForm({ ...settings, brain: { ...settings.brain, oauth_token_set: true, login: 'subscription_token' } })
		expect(form['brain.oauth_token']).toBe('')
		expect(toPatch(form, { ...form })).toEqual({})
		expect(toPatch({ ...form, 'brain.oauth_token': 'sk-ant-oat01-x' }, form)).toEqual({ brain: { oauth_token: 'sk-ant-oat01-x' } })
		expect(toPatch(form, form, { clearOauthToken: true })).toEqual({ brain: { oauth_token: '' } })
	})

	it('lists and numbers become JSON types; a non-number is sent as typed for the sidecar to name', () => {
		const form = toForm(settings)
		const patch = toPatch({ ...form, 'network.allowed_hosts': 'a.org:443\n\n b.org:443 ', 'workers.max': '2', 'limits.retention_days': 'ten' }, form)
		expect(patch).toEqual({ network: { allowed_hosts: ['a.org:443', 'b.org:443'] }, workers: { max: 2 }, limits: { retention_days: 'ten' } })
		expect(parseList('a, b\nc')).toEqual(['a', 'b', 'c'])
	})

	it('422 from the sidecar lands on the fields; unknown names are listed apart', async () => {
		srv.routes['GET admin/settings'] = () => [200, { settings, restart_required: [] }]
		srv.routes['PUT admin/settings'] = () => [422, { code: 'invalid_settings', message: 'invalid', fields: { 'workers.max': 'must be at least 1', 'other.thing': 'bad' } }]
		const a = createAdminStore()
		await a.loadSettings()
		a.state.form['workers.max'] = '0'
		await a.save()
		expect(srv.requests.at(-1).body).toEqual({ workers: { max: 0 } })
		expect(a.state.fieldErrors['workers.max']).toBe('must be at least 1')
		expect(a.unplacedErrors()).toEqual([['other.thing', 'bad']])
		expect(a.state.savedOk).toBe(false)
	})

	it('a save answers with the stored settings and what needs a restart', async () => {
		srv.routes['GET admin/settings'] = () => [200, { settings, restart_required: [] }]
		srv.routes['PUT admin/settings'] = (req) => [200, { settings: { ...settings, workers: { ...settings.workers, ...req.body.workers } }, restart_required: ['workers.max'] }]
		const a = createAdminStore()
		await a.loadSettings()
		a.state.form['workers.max'] = '6'
		a.state.form['brain.api_key'] = 'sk-secret'
		await a.save()
		expect(srv.requests.at(-1).body).toEqual({ workers: { max: 6 }, brain: { api_key: 'sk-secret' } })
		expect(a.state.form['workers.max']).toBe('6')
		expect(a.state.form['brain.api_key']).toBe('')
		expect(a.state.restartRequired).toEqual(['workers.max'])
	})

	it('health errors are kept for the page', async () => {
		srv.routes['GET admin/health'] = () => [503, { code: 'sidecar_unavailable', message: 'The Istota service cannot be reached.' }]
		const a = createAdminStore()
		await a.loadHealth()
		expect(a.state.healthError.code).toBe('sidecar_unavailable')
		expect(a.state.health).toBeNull()
	})
})

describe('status store: how long history is kept', () => {
	const status = (over) => ({ running: null, queued: [], recent: [], usage: null, timezone: 'UTC', ...over })
	it('takes history_days from the status, and null when the service does not say', async () => {
		const stub = (s) => ({ getStatus: async () => s, getTaskEvents: async () => ({ events: [] }), stopTasks: async () => ({}), mintWsToken: async () => ({}) })
		const kept = createStatusStore(stub(status({ history_days: 30 })))
		await kept.load()
		expect(kept.state.historyDays).toBe(30)
		const forever = createStatusStore(stub(status({ history_days: 0 })))
		await forever.load()
		expect(forever.state.historyDays).toBe(0)
		const older = createStatusStore(stub(status({})))
		await older.load()
		expect(older.state.historyDays).toBe(null)
	})
})

describe('approvals store', () => {
	const pending = { id: 7, tier: 'external', name: 'email send', summary: 'Send an e-mail to bob@example.org', status: 'pending' }
	const policies = { admin: { read: 'allow', write_own: 'allow', external: 'ask', admin: 'ask' }, user: { external: '' }, effective: { read: 'allow', write_own: 'allow', external: 'ask', admin: 'ask' } }

	it('offers only what is at least as strict as the administrator\'s choice', () => {
		expect(stricterChoices('allow')).toEqual(['', 'allow', 'ask', 'deny'])
		expect(stricterChoices('ask')).toEqual(['', 'ask', 'deny'])
		expect(stricterChoices('deny')).toEqual(['', 'deny'])
	})

	it('answers a question and reads the lists again', async () => {
		let answered = null
		srv.routes['GET me/approvals'] = () => [200, answered === null
			? { pending: [pending], recent: [], policies, timeout_seconds: 1800 }
			: { pending: [], recent: [{ ...pending, status: answered ? 'approved' : 'denied', decided_via: 'page' }], policies, timeout_seconds: 1800 }]
		srv.routes['POST me/approvals/7'] = (req) => { answered = req.body.approve; return [200, { ...pending, status: 'approved' }] }
		const a = createApprovalsStore()
		await a.load()
		expect(a.state.pending.map((r) => r.id)).toEqual([7])
		expect(a.state.timeoutSeconds).toBe(1800)
		expect(a.state.draft).toEqual({ read: '', write_own: '', external: '', admin: '' })
		await a.decide(7, true)
		expect(answered).toBe(true)
		expect(a.state.pending).toEqual([])
		expect(a.state.recent[0].status).toBe('approved')
		expect(a.state.busy).toEqual({})
	})

	it('a refused answer is shown, and a refused policy keeps the choice', async () => {
		srv.routes['GET me/approvals'] = () => [200, { pending: [pending], recent: [], policies, timeout_seconds: 60 }]
		srv.routes['POST me/approvals/7'] = () => [404, { code: 'not_found', message: 'No such question.' }]
		srv.routes['PUT me/approvals/policies'] = () => [422, { code: 'invalid_policies', message: 'external: you cannot loosen what the administrator set' }]
		const a = createApprovalsStore()
		await a.load()
		await a.decide(7, false)
		expect(a.state.actionError.id).toBe(7)
		expect(a.state.actionError.error.message).toBe('No such question.')
		a.state.draft.external = 'allow'
		expect(a.dirty()).toBe(true)
		await a.savePolicies()
		expect(a.state.saveError.message).toMatch(/cannot loosen/)
		expect(a.state.draft.external).toBe('allow')
		expect(a.state.savedOk).toBe(false)
	})
})
