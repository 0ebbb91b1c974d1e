<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\AppInfo\Application;
use OCP\App\IAppManager;
use OCP\IConfig;
use OCP\IGroupManager;
use OCP\IURLGenerator;

/**
 * PageState is the initial state of both settings pages (IInitialState key "settings"):
 * exactly {botName, version, filesUrl, wsPath, isAdmin, installCommand}. It is built from
 * local values only, so rendering a settings page never waits for the sidecar, and it
 * never holds a secret or a token. installCommand (the `istota install` command of this
 * server, shown when the sidecar does not answer) is given to admins only.
 */
class PageState {
	public const KEY = 'settings';

	public function __construct(
		private readonly AppSettings $settings,
		private readonly IAppManager $appManager,
		private readonly IGroupManager $groupManager,
		private readonly IURLGenerator $urls,
		private readonly IConfig $config,
		private readonly InstallCommand $install,
	) {
	}

	/**
	 * @return array{botName: string, version: string, filesUrl: string, wsPath: string, isAdmin: bool, installCommand: string}
	 */
	public function forUser(string $uid): array {
		$botName = $this->settings->botName();
		$isAdmin = $uid !== '' && (bool)$this->groupManager->isAdmin($uid);
		return [
			'botName' => $botName,
			'version' => $this->version(),
			'filesUrl' => $this->filesUrl($botName),
			'wsPath' => $this->settings->wsPath(),
			'isAdmin' => $isAdmin,
			'installCommand' => $isAdmin ? $this->install->command() : '',
		];
	}

	/**
	 * The Files app at the bot folder shared with the user: the sidecar names it after the
	 * bot in lower case, and Nextcloud puts received shares below share_folder.
	 */
	private function filesUrl(string $botName): string {
		$shareFolder = '/' . trim($this->config->getSystemValueString('share_folder', '/'), '/');
		$dir = rtrim($shareFolder, '/') . '/' . mb_strtolower($botName);
		return $this->urls->linkToRoute('files.view.index', ['dir' => $dir]);
	}

	private function version(): string {
		try {
			return (string)$this->appManager->getAppVersion(Application::APP_ID);
		} catch (\Throwable) {
			return '';
		}
	}
}
