/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { createMailboxStore } from '../../src/stores/mailbox.js'
import { startOcsServer } from './helpers/ocsServer.js'

let srv
beforeEach(async () => { srv = await startOcsServer() })
afterEach(async () => { await srv.close() })

const connected = {
	connected: true, host: 'imap.example.org', port: 993, tls: 'tls', username: 'alice@example.org',
	connected_at: '2026-11-26T10:00:00Z', checked_at: '2026-11-26T10:00:00Z', ok: true, messages: 12, unseen: 3,
}

describe('mailbox store', () => {
	it('connects with the form, then forgets the password it sent', async () => {
		srv.routes['GET me/mailbox'] = () => [200, { connected: false }]
		srv.routes['PUT me/mailbox'] = () => [200, connected]
		const m = createMailboxStore()
		await m.load()
		expect(m.state.editing).toBe(true)
		Object.assign(m.state.form, { host: ' imap.example.org ', username: 'alice@example.org', password: 's3cret' })
		m.setTls('starttls')
		expect(m.state.form.port).toBe(143)
		m.setTls('tls')
		expect(m.state.form.port).toBe(993)
		await m.connect()
		expect(srv.requests.at(-1).body).toEqual({ host: 'imap.example.org', port: 993, tls: 'tls', username: 'alice@example.org', password: 's3cret' })
		expect(m.state.mailbox.connected).toBe(true)
		expect(m.state.editing).toBe(false)
		expect(m.state.form.password).toBe('')
		expect(m.state.form.username).toBe('alice@example.org')
	})

	it('a port typed by hand stays when the mode changes', async () => {
		srv.routes['GET me/mailbox'] = () => [200, { connected: false }]
		const m = createMailboxStore()
		await m.load()
		m.state.form.port = 10993
		m.setTls('starttls')
		expect(m.state.form.port).toBe(10993)
	})

	it('a refused login shows on its field and clears the password', async () => {
		srv.routes['GET me/mailbox'] = () => [200, { connected: false }]
		srv.routes['PUT me/mailbox'] = () => [422, { code: 'invalid_settings', message: 'the mailbox could not be connected', fields: { password: 'imap.example.org refused the user name or the password' } }]
		const m = createMailboxStore()
		await m.load()
		Object.assign(m.state.form, { host: 'imap.example.org', username: 'a', password: 'wrong' })
		await m.connect()
		expect(m.state.fieldErrors.password).toContain('refused')
		expect(m.state.form.password).toBe('')
		expect(m.state.mailbox.connected).toBe(false)
	})

	it('tests and disconnects', async () => {
		srv.routes['GET me/mailbox'] = () => [200, connected]
		srv.routes['POST me/mailbox/test'] = () => [200, { ...connected, ok: false, last_error: 'could not connect to imap.example.org:993: connection refused' }]
		srv.routes['DELETE me/mailbox'] = () => [200, { connected: false }]
		const m = createMailboxStore()
		await m.load()
		expect(m.state.editing).toBe(false)
		await m.test()
		expect(m.state.mailbox.last_error).toContain('connection refused')
		await m.disconnect()
		expect(m.state.mailbox.connected).toBe(false)
		expect(m.state.editing).toBe(true)
		expect(m.state.form.host).toBe('')
	})
})
