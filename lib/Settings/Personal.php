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
 * Personal is the "Istota" section of every user's personal settings: the page is the
 * Vue app of js/istota-personal-settings.mjs, which reads its data through the OCS API.
 * getForm() only provides local initial state: it never calls the sidecar, so a sidecar
 * that is down cannot break the settings page.
 */
class Personal implements ISettings {
	public const TEMPLATE = 'personal-settings';

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
		return PersonalSection::ID;
	}

	public function getPriority(): int {
		return 50;
	}
}
