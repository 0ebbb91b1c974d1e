/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * "Your mailbox": the user's own IMAP account. The password lives in the form only
 * while the user types it; it is cleared after every attempt and never read back.
 */
import { reactive } from 'vue'
import * as personalApi from '../api/personal.js'

/** The default port of each TLS mode. */
export const DEFAULT_PORTS = Object.freeze({ tls: 993, starttls: 143 })

const emptyForm = () => ({ host: '', port: DEFAULT_PORTS.tls, tls: 'tls', username: '', password: '' })

/**
 * createMailboxStore makes the store.
 *
 * @param {object} [api] getMailbox, putMailbox, testMailbox, deleteMailbox
 * @return {object} state and actions
 */
export function createMailboxStore(api = personalApi) {
	const state = reactive({
		loaded: false,
		error: null,
		mailbox: { connected: false },
		form: emptyForm(),
		editing: false,
		busy: '', // connect | test | disconnect
		fieldErrors: {},
		actionError: null,
	})

	function apply(mb) {
		state.mailbox = mb && typeof mb === 'object' ? mb : { connected: false }
		state.editing = !state.mailbox.connected
		state.form = state.mailbox.connected
			? { host: mb.host, port: mb.port, tls: mb.tls, username: mb.username, password: '' }
			: emptyForm()
	}

	async function load() {
		try {
			apply(await api.getMailbox())
			state.error = null
			state.loaded = true
		} catch (err) {
			state.error = err
		}
	}

	/** setTls switches the mode and the port with it, unless the port was changed by hand. */
	function setTls(mode) {
		if (state.form.port === DEFAULT_PORTS[state.form.tls]) {
			state.form.port = DEFAULT_PORTS[mode]
		}
		state.form.tls = mode
	}

	async function run(what, call) {
		state.busy = what
		state.actionError = null
		state.fieldErrors = {}
		try {
			apply(await call())
		} catch (err) {
			if (err.code === 'invalid_settings' && err.fields) {
				state.fieldErrors = { ...err.fields }
			}
			state.actionError = err
		} finally {
			state.busy = ''
			// Never kept: a failed attempt is typed again, a good one is stored sealed.
			state.form.password = ''
		}
	}

	/** connect sends the form; the sidecar logs in before it keeps anything. */
	const connect = () => run('connect', () => api.putMailbox({
		host: state.form.host.trim(),
		port: Number(state.form.port) || 0,
		tls: state.form.tls,
		username: state.form.username.trim(),
		password: state.form.password,
	}))

	const test = () => run('test', () => api.testMailbox())

	const disconnect = () => run('disconnect', () => api.deleteMailbox())

	/** edit opens the form over a connected mailbox (cancel closes it again). */
	function edit(open = true) {
		state.editing = open || !state.mailbox.connected
		state.fieldErrors = {}
		state.actionError = null
		if (!open) {
			apply(state.mailbox)
		}
	}

	return { state, load, setTls, connect, test, disconnect, edit }
}
