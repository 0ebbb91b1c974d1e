/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * What @nextcloud/* read from a Nextcloud page: the web root, the CSRF token and the
 * current user on <head>.
 */
window._oc_webroot = ''
document.head.dataset.requesttoken = 'test-request-token'
document.head.dataset.user = 'alice'
document.head.dataset.userDisplayname = 'Alice'
