/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
import { loadState } from '@nextcloud/initial-state'

/**
 * pageState is the page's initial state (IInitialState 'istota' / 'settings'), with
 * defaults so that a template without it still renders.
 *
 * @return {{botName: string, version: string, filesUrl: string, wsPath: string, isAdmin: boolean, installCommand: string}}
 */
export function pageState() {
	const state = loadState('istota', 'settings', {})
	return {
		botName: state.botName || 'Istota',
		version: state.version || '',
		filesUrl: state.filesUrl || '',
		wsPath: state.wsPath || '',
		isAdmin: Boolean(state.isAdmin),
		installCommand: typeof state.installCommand === 'string' ? state.installCommand : '',
	}
}

/**
 * currentUid is the logged-in user as Nextcloud's page names it (`<head data-user>`),
 * "" when the page does not say.
 *
 * @return {string}
 */
export function currentUid() {
	return document.head?.dataset?.user || ''
}
