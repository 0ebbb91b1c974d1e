<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Settings;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Service\PageState;
use OCP\AppFramework\Http\TemplateResponse;
use OCP\AppFramework\Services\IInitialState;
use OCP\IUser;
use OCP\IUserSession;
use OCP\Settings\ISettings;

/**
 * Admin is the "Istota" section of the administration settings: the Vue app of
 * js/istota-admin-settings.mjs (health, pairing help, access, sandbox, brain, limits),
 * which reads and writes through the admin-only OCS routes. Like Personal, getForm()
 * never calls the sidecar.
 */
class Admin implements ISettings {
	public const TEMPLATE = 'admin-settings';

	public function __construct(
		private readonly IInitialState $initialState,
		private readonly PageState $pageState,
		private readonly IUserSession $userSession,
	) {
	}

	public function getForm(): TemplateResponse {
		$user = $this->userSession->getUser();
		$uid = $user instanceof IUser ? (string)$user->getUID() : '';
		$this->initialState->provideInitialState(PageState::KEY, $this->pageState->forUser($uid));
		return new TemplateResponse(Application::APP_ID, self::TEMPLATE);
	}

	public function getSection(): string {
		return AdminSection::ID;
	}

	public function getPriority(): int {
		return 50;
	}
}
